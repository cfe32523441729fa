"""Fixtures of the browser tests: a local Chromium (or Chrome) driven by Playwright (sync API).

Which browser: ``$CHROMIUM_PATH`` when set (it must then be an executable file), else the
first of ``chromium``, ``chromium-browser``, ``google-chrome``, ``google-chrome-stable`` and
``chrome`` on the PATH, else the usual install folders of Linux (snap), macOS and Windows
(see ``helpers.find_chromium``). Playwright never downloads a browser here.

None found: under any truthy ``CI`` (``1``, ``true``, ``yes``, ...) the tests FAIL; elsewhere
they are skipped, and the end of the pytest output says loudly which were skipped and why.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from .helpers import ROOT, ChromiumNotFound, find_chromium, is_ci

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = ROOT / "test-artifacts"  # gitignored
LAUNCH_TIMEOUT_MS = 30_000  # Playwright's own default, written out: the end-to-end test's budget counts it

_skipped: list[str] = []  # node ids of the browser tests skipped for want of a browser
_reason: list[str] = []


@pytest.fixture(scope="session")
def chromium_executable() -> str:
    try:
        return find_chromium()
    except ChromiumNotFound as missing:
        message = str(missing)
        if is_ci():
            pytest.fail(f"CI={os.environ.get('CI')!r}, so the browser tests must run, but {message}", pytrace=False)
        _reason[:] = [message]
        pytest.skip(message)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and _reason and "chromium_executable" in getattr(item, "fixturenames", ()):
        if item.nodeid not in _skipped:
            _skipped.append(item.nodeid)


def pytest_terminal_summary(terminalreporter):
    if not _skipped:
        return
    tr = terminalreporter
    tr.section("BROWSER TESTS NOT RUN", sep="!", red=True, bold=True)
    tr.write_line(f"{len(_skipped)} browser test(s) were SKIPPED, so the widgets were not checked in a browser:", red=True)
    tr.write_line(f"  {_reason[0]}")
    for nodeid in _skipped:
        tr.write_line(f"  skipped: {nodeid}")
    tr.write_line("(With CI set to a true value, such as CI=1, a missing browser fails the run instead.)")


@pytest.fixture(scope="module")
def browser_context(chromium_executable, tmp_path_factory):
    """A fresh headless Chromium profile for the test module (Playwright refuses --user-data-dir in args)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=chromium_executable,
            headless=True, args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 1000},
            timeout=LAUNCH_TIMEOUT_MS,
        )
        context.set_default_timeout(20_000)
        try:
            yield context
        finally:
            context.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
