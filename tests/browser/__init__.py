"""Browser tests of attnlib.viz.widgets (marked `browser`; need /usr/bin/chromium)."""
