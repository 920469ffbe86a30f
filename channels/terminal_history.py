"""The terminal's line history: what the arrow keys recall, kept in ``<data_dir>/terminal_history``.

Nothing the bot refuses is kept (DESIGN §1.6): a line the ``keep`` test rejects (``/auth <password>``,
``/config open_ai_api_key sk-…``) is neither written to the file nor recalled in this run. ``/forget`` of the
terminal's conversation empties it, file and memory. prompt_toolkit's own ``FileHistory`` writes the file.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from prompt_toolkit.history import FileHistory, History, InMemoryHistory

from core.files import replacing

logger = logging.getLogger(__name__)


class KeptHistory(History):
    """A history that keeps only the lines ``keep`` accepts, in ``path`` (owner-only) or for this run only."""

    def __init__(self, path: Path | None, keep: Callable[[str], bool]) -> None:
        super().__init__()
        self.path = path
        self.keep = keep
        self.inner: History = InMemoryHistory() if path is None else FileHistory(str(path))

    def load_history_strings(self) -> Iterable[str]:
        """The stored lines, newest first."""
        return self.inner.load_history_strings()

    def store_string(self, string: str) -> None:
        """Store one line (only lines ``keep`` accepted get here)."""
        self.inner.store_string(string)

    def append_string(self, string: str) -> None:
        """Add a line to the history, unless it holds a secret."""
        if self.keep(string):
            super().append_string(string)

    def clear(self) -> None:
        """Forget every line: the file is emptied (its mode stays) and nothing is recalled any more."""
        self._loaded_strings = []
        if isinstance(self.inner, InMemoryHistory):
            self.inner = InMemoryHistory()
        elif self.path is not None:
            with open(self.path, "r+b") as fh:
                fh.truncate(0)
                os.fsync(fh.fileno())


def open_history(path: Path | None, keep: Callable[[str], bool]) -> KeptHistory:
    """The history in ``path`` (created owner-only), or for this run only when it cannot be written."""
    if path is None:
        return KeptHistory(None, keep)
    try:
        # it holds what the user typed: the owner's eyes only, like the database
        os.close(os.open(path, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o600))
        scrub(path, keep)
        return KeptHistory(path, keep)
    except OSError as exc:
        logger.warning("terminal history is kept for this run only: cannot write %s (%s)", path,
                       exc.strerror or exc)
        return KeptHistory(None, keep)


def scrub(path: Path, keep: Callable[[str], bool]) -> int:
    """Rewrite ``path`` without the lines ``keep`` rejects (a file an older version wrote them to); return how
    many went."""
    lines = list(FileHistory(str(path)).load_history_strings())[::-1]  # oldest first
    kept = [line for line in lines if keep(line)]
    if len(kept) == len(lines):
        return 0
    with replacing(path) as tmp:  # owner-only, renamed over the file once every kept line is in
        fresh = FileHistory(str(tmp))
        for line in kept:
            fresh.store_string(line)
    logger.info("terminal history: %d line(s) holding a secret removed", len(lines) - len(kept))
    return len(lines) - len(kept)
