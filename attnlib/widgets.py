"""Old path of attnlib.viz.widgets, kept until the notebooks, exercises and tools import the new one."""
from .viz.widgets import EXPORT_MIME, AttentionExplorer, AttentionHeatmap  # noqa: F401
