"""Fixtures of the browser tests: Debian's Chromium driven by Playwright (sync API).

Chromium missing: skipped on a laptop, a FAILURE when the environment says ``CI=true``.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from .helpers import ROOT

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = ROOT / "test-artifacts"  # gitignored


@pytest.fixture(scope="session")
def chromium_executable() -> str:
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} not found; install it with `sudo apt-get install chromium`"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {message}", pytrace=False)
        pytest.skip(message)
    return str(CHROMIUM)


@pytest.fixture(scope="module")
def browser_context(chromium_executable, tmp_path_factory):
    """A fresh headless Chromium profile for the test module (Playwright refuses --user-data-dir in args)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=chromium_executable,
            headless=True, args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 1000},
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
