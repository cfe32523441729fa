"""attnlib.viz: the learner's tools for looking at attention (the top floor of attnlib).

* ``plotting``: static matplotlib plots (``plot_heatmap``, ``plot_heads``, ``plot_curves``).
* ``widgets``: the interactive ``AttentionHeatmap`` and ``AttentionExplorer`` (anywidget).
* ``compare``: ``compare(a, b, ...)``, two sets of maps and their difference (``AttentionCompare``).
* ``state``: ``AttentionState``, the one object a widget hands to what draws it, and the numbers
  shared with the browser code in ``static/``.
* ``inputs`` (the widgets' input checks), ``render`` (the labelled PNG), ``export`` (a
  self-contained HTML page, and the payload the static site turns into a live widget).

Importing this package imports none of them: ``attnlib.plot_heatmap`` loads matplotlib only,
``attnlib.AttentionExplorer`` anywidget only.
"""
