"""Browser tests of attnlib.widgets (marked `browser`; need /usr/bin/chromium)."""
