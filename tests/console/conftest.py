"""The web console in a real headless Chromium: Debian's ``chromium`` driven by Playwright's Python package.

Tests skip when Playwright or a Chromium binary is missing (``.ci/run`` installs both). Screenshots of
every page, at 1280x800 and at a phone's width, go to one folder, named at the end of the test output.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

#: Where the screenshots of this run go (set by the first test that takes one).
SHOTS: list[Path] = []
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


def chromium_path() -> str | None:
    """Debian's chromium (or $CHROMIUM_PATH), or None."""
    candidates = [os.environ.get("CHROMIUM_PATH", ""), "chromium", "chromium-browser", "google-chrome"]
    for name in candidates:
        found = shutil.which(name) if name else None
        if found:
            return found
    return None


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
