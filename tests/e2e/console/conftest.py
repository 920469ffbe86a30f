"""Fixtures of the console's browser tests: a headless Chromium per module and the screenshot folder."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.console.conftest import SHOTS, chromium_path


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """A headless Chromium for one test module. Playwright's sync API runs its own event loop in this thread,
    so it is closed when the module is done: later asyncio tests need the thread's loop to themselves."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright's Python package is not installed")
    path = chromium_path()
    if path is None:
        pytest.skip("no Chromium binary found (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="session")
def shots() -> Path:
    """The folder the screenshots go to: $CONSOLE_SCREENSHOTS, else a new temporary folder that outlives the run
    (pytest's own temporary folders are rotated away by later runs)."""
    folder = Path(os.environ["CONSOLE_SCREENSHOTS"]) if os.environ.get("CONSOLE_SCREENSHOTS") else \
        Path(tempfile.mkdtemp(prefix="console-screenshots-"))
    folder.mkdir(parents=True, exist_ok=True)
    SHOTS.append(folder)
    return folder


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001 - pytest's hook
    """Name the screenshot folder in the test output."""
    for folder in SHOTS:
        count = len(list(folder.glob("*.png")))
        terminalreporter.write_line(f"web console screenshots ({count}): {folder}")
