"""Watch config.json and apply valid edits live (DESIGN §1.5).

The folder is watched, not the file, because editors replace files atomically; events are filtered to
the file's name. Every change is validated like a start-up load. A valid edit is put in force through
``ConfigHolder.replace`` (restart-only keys keep their running values and are logged as waiting for a
restart); an invalid one is logged in one line and the settings in force stay. A file whose settings
equal those in force (the bot's own ``/config`` writes) changes nothing, so nothing applies twice.
The watcher also compares the file's content on every ``rust_timeout`` tick, so an edit that raced the
watcher's start is still seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

import watchfiles

from config.settings import Config, ConfigHolder, live_config, load_config
from core.errors import ConfigError

logger = logging.getLogger(__name__)


class ConfigWatcher:
    """Applies edits of config.json to a :class:`ConfigHolder` while the bot runs."""

    def __init__(self, holder: ConfigHolder, path: str | Path | None = None, *, debounce_ms: int = 150,
                 tick_ms: int = 1000, environ: dict[str, str] | None = None,
                 check: Callable[[Config], None] | None = None) -> None:
        target = path if path is not None else holder.path
        if target is None:
            raise ValueError("ConfigWatcher needs the config file's path")
        self.holder = holder
        self.path = Path(target).expanduser().resolve()
        self.debounce_ms = debounce_ms
        self.tick_ms = tick_ms
        self.environ = environ
        #: what a loaded file must also pass (``channel_type`` against the channel registry); raises ConfigError
        self.extra_check = check
        self._digest = self._read_digest()
        self._file_config = holder.current  # the last valid settings read from the file
        self._rejected = False  # the file's last version was invalid
        #: how many new versions of the file have been looked at
        self.checked = 0
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self.ready = asyncio.Event()

    def _read_digest(self) -> bytes | None:
        try:
            return hashlib.sha256(self.path.read_bytes()).digest()
        except OSError:
            return None

    async def start(self) -> None:
        """Start watching in the background."""
        if self._task is not None:
            return
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="config-watcher")

    async def stop(self) -> None:
        """Stop watching."""
        if self._task is None:
            return
        assert self._stop is not None
        self._stop.set()
        try:
            async with asyncio.timeout(self.tick_ms / 1000 + 2):  # not wait_for: it can swallow our cancel
                await asyncio.shield(self._task)
        except TimeoutError:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._task = None

    async def _run(self) -> None:
        name = self.path.name

        def only_the_file(_change: watchfiles.Change, changed: str) -> bool:
            return Path(changed).name == name

        try:
            async for _changes in watchfiles.awatch(
                self.path.parent, watch_filter=only_the_file, debounce=self.debounce_ms, step=50,
                stop_event=self._stop, rust_timeout=self.tick_ms, yield_on_timeout=True, recursive=False,
            ):
                self.ready.set()
                try:
                    self.check()
                except Exception:  # noqa: BLE001 - the watcher must outlive any one bad edit
                    logger.exception("config watcher: checking %s failed", self.path)
        except Exception:  # noqa: BLE001 - e.g. the folder vanished; the bot keeps running
            logger.exception("config watcher stopped: cannot watch %s", self.path.parent)
        finally:
            self.ready.set()

    def check(self) -> bool:
        """Look at the file now; apply it if it changed and is valid. True if the settings in force changed."""
        digest = self._read_digest()
        if digest is None or digest == self._digest:
            return False
        self._digest = digest
        self.checked += 1
        try:
            cfg = load_config(self.path, self.environ)
            if self.extra_check is not None:
                self.extra_check(cfg)
        except ConfigError as exc:
            self._rejected = True
            logger.error("config.json change rejected: %s; the previous settings stay in force", exc)
            return False
        if self._rejected:
            self._rejected = False
            # said on the console too, where the rejection was said (the terminal's console shows warnings only)
            logger.info("config.json is valid again: its settings are applied", extra={"console": True})
        live, pending = live_config(cfg, self.holder.current)
        fresh = [k for k in pending if getattr(cfg, k) != getattr(self._file_config, k)]
        self._file_config = cfg
        if fresh:
            logger.warning("config.json: %s changed; this takes effect after a restart", ", ".join(fresh))
        if live == self.holder.current:
            return False
        changed = self.holder.replace(live)
        logger.info("config.json reloaded: %s changed", ", ".join(changed))
        return True
