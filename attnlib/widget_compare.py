"""Old path of attnlib.viz.compare, kept until the notebooks import the new one."""
from .viz.compare import AttentionCompare, compare  # noqa: F401
