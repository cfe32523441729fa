"""Sphinx configuration of the series' static site (built by tools/build_site.py; see the README, "The site").

The notebooks are rendered as committed: myst-nb never executes them. Every asset is local:
the theme's files, the search index, and MathJax 3 from the PyPI package sphinx-mathjax-offline
(Sphinx's default MathJax is a CDN address).
"""
project = "attention-notebooks"
author = "the attention-notebooks authors"
copyright = "the attention-notebooks authors, MIT licence"

extensions = [
    "myst_nb",
    "sphinx-mathjax-offline",  # sets mathjax_path to _static/mathjax/tex-chtml.js and copies MathJax there
    "sphinx.ext.githubpages",  # writes .nojekyll, so GitHub Pages serves _static/ and _images/
]

nb_execution_mode = "off"  # show the stored outputs; never run a notebook
nb_ipywidgets_js = {}  # no require.js / widget manager from a CDN (tools/build_site.py renders the widgets)
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3

exclude_patterns = ["_extra", "**.ipynb_checkpoints"]
html_extra_path = ["_extra"]  # the widget pages (widgets/*.html), written by tools/build_site.py
html_static_path = ["_static"]
html_js_files = ["attnlib-site.js"]
html_css_files = ["attnlib-site.css"]
html_title = "Attention, from seq2seq to transformers"
html_theme = "sphinx_book_theme"
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": False,  # the download menu offers the temporary copy, not the repository's file
    "use_fullscreen_button": False,
}
html_show_sourcelink = False
html_copy_source = False
# pydata-sphinx-theme (under the book theme) logs a console error when the colour mode is empty
html_context = {"default_mode": "auto"}
