"""Old path of the export of attnlib.viz, kept until tools/build_site.py imports attnlib.viz.export."""
from .viz.export import export_page  # noqa: F401
