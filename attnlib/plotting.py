"""Old path of attnlib.viz.plotting, kept until the notebooks and attnlib.training import the new one."""
from .viz.plotting import plot_curves, plot_heads, plot_heatmap  # noqa: F401
