"""``<data_dir>/knowledge/<scope>/``: documents an operator puts in a folder (DESIGN §14).

At start every file under a scope folder is checked against the database (an unchanged file, by sha256, is not
indexed again, so a restart re-embeds nothing), documents the folder added whose file is gone are removed, and
then the folder is watched with ``watchfiles`` (as config/watch.py watches config.json): a new or changed file is
indexed, a deleted one removed. A file over the size cap is refused by its size before it is read; a refused or
unreadable file is logged once with its reason, and nothing changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from pathlib import Path

import watchfiles

from knowledge.base import KnowledgeBase, Refused, too_large
from knowledge.parse import kind_of
from knowledge.scopes import valid_scope

logger = logging.getLogger(__name__)

#: ``added_by`` of the documents this adds (only those are removed when their file goes).
FOLDER = "folder"


class KnowledgeFolder:
    """Keeps the documents of ``root``'s scope folders in step with the files."""

    def __init__(self, kb: KnowledgeBase, root: Path, *, debounce_ms: int = 400) -> None:
        self.kb = kb
        self.root = root
        self.debounce_ms = debounce_ms
        self._task: asyncio.Task | None = None
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None
        #: set once the first scan is done and the watch has started (tests)
        self.ready = asyncio.Event()
        #: (scope, name) -> the last refusal logged, so a file is not reported again until it changes
        self._refused: dict[tuple[str, str], str] = {}

    def _place(self, path: Path) -> tuple[str, str] | None:
        """``(scope, name)`` of a file directly in a scope folder, or None."""
        try:
            rel = path.relative_to(self.root)
        except ValueError:
            return None
        if len(rel.parts) != 2 or rel.name.startswith((".", "~")) or not valid_scope(rel.parts[0]):
            return None
        if kind_of(rel.name) is None:
            return None
        return rel.parts[0], rel.name

    def files(self) -> dict[tuple[str, str], Path]:
        """Every document file under the scope folders."""
        found: dict[tuple[str, str], Path] = {}
        if not self.root.is_dir():
            return found
        for folder in sorted(self.root.iterdir()):
            if not folder.is_dir() or folder.is_symlink():
                continue
            for path in sorted(folder.iterdir()):
                place = self._place(path)
                if place is not None and path.is_file():
                    found[place] = path
        return found

    async def index(self, scope: str, name: str, path: Path) -> None:
        """Index one file (unchanged ones cost a hash); a refusal is logged, never raised."""
        try:
            size = (await asyncio.to_thread(path.stat)).st_size
            reason = too_large(size, self.kb.config().knowledge_max_mb)
            if reason:
                raise Refused(f"{name} was not added: {reason}")
            data = await asyncio.to_thread(path.read_bytes)
            added = await self.kb.add(scope, name, data, FOLDER)
        except Refused as exc:
            if self._refused.get((scope, name)) != str(exc):
                self._refused[(scope, name)] = str(exc)
                logger.warning("knowledge folder: %s/%s: %s", scope, name, exc)
            return
        except OSError as exc:  # gone or unreadable meanwhile
            logger.warning("knowledge folder: cannot read %s: %s", path, exc)
            return
        self._refused.pop((scope, name), None)
        if not added.unchanged:
            logger.info("knowledge folder: %s/%s indexed (%d chunks)", scope, name, added.document.chunks)

    async def _new_folder(self, folder: Path) -> None:
        """A scope folder that appeared: index the files already in it. The watcher watches a new folder only once
        it has seen it, so a file put there at once (``mkdir global && cp faq.md global/``, or a copied folder) raises
        no event of its own."""
        files = await asyncio.to_thread(self.files)
        for (scope, name), path in files.items():
            if path.parent == folder:
                await self.index(scope, name, path)

    async def scan(self) -> None:
        """Index new and changed files; remove the folder's documents whose files are gone."""
        files = await asyncio.to_thread(self.files)
        for (scope, name), path in files.items():
            await self.index(scope, name, path)
        for doc in await self.kb.documents():
            if doc.added_by == FOLDER and (doc.scope, doc.name) not in files:
                await self.kb.remove(doc.scope, doc.name)

    def begin(self) -> None:
        """Scan, then watch, in a background task created now (so a stop right after it stops it)."""
        if self._task is not None:
            return
        self._stop = threading.Event()
        self._task = asyncio.create_task(self._run(), name="knowledge-folder")

    async def start(self) -> None:
        """:meth:`begin`, from a coroutine."""
        self.begin()

    async def stop(self) -> None:
        """Stop watching (the watching thread ends within a second)."""
        task, self._task = self._task, None
        if task is None:
            return
        assert self._stop is not None
        self._stop.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        thread, self._thread = self._thread, None
        if thread is not None:
            await asyncio.to_thread(thread.join, 5)

    def _watch(self, loop: asyncio.AbstractEventLoop, changes: asyncio.Queue) -> None:
        """The watching thread: ``watchfiles.watch`` (its Rust watcher), each batch handed to the loop. Not
        ``awatch``: its AnyIO worker thread and task group would share the bot's event loop and its tasks'
        cancellation for as long as the bot runs."""
        assert self._stop is not None
        try:
            for batch in watchfiles.watch(self.root, debounce=self.debounce_ms, step=50, stop_event=self._stop,
                                          rust_timeout=1000, yield_on_timeout=True, recursive=True,
                                          raise_interrupt=False):
                if loop.is_closed():  # the bot's loop ended without a stop: nobody reads the changes
                    return
                loop.call_soon_threadsafe(changes.put_nowait, batch)
        except Exception:  # noqa: BLE001 - e.g. the folder vanished; the bot keeps running
            logger.exception("knowledge folder: cannot watch %s any more", self.root)
        finally:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(changes.put_nowait, None)

    async def _run(self) -> None:
        try:
            await asyncio.to_thread(self.root.mkdir, parents=True, exist_ok=True, mode=0o700)
            await self.scan()
        except Exception:  # noqa: BLE001 - the bot runs on without the folder
            logger.exception("knowledge folder: the first scan of %s failed", self.root)
        changes: asyncio.Queue = asyncio.Queue()
        self._thread = threading.Thread(target=self._watch, args=(asyncio.get_running_loop(), changes),
                                        name="knowledge-folder", daemon=True)
        self._thread.start()
        try:
            while (batch := await changes.get()) is not None:
                self.ready.set()
                for change, changed in sorted(batch, key=lambda c: c[1]):
                    await self._changed(change, Path(changed))
        finally:
            self.ready.set()

    async def _changed(self, change: watchfiles.Change, path: Path) -> None:
        if change != watchfiles.Change.deleted and path.parent == self.root and await asyncio.to_thread(path.is_dir):
            await self._new_folder(path)
            return
        place = self._place(path)
        if place is None:
            return
        scope, name = place
        try:
            if change == watchfiles.Change.deleted or not await asyncio.to_thread(path.is_file):
                doc = next((d for d in await self.kb.documents([scope]) if d.name == name), None)
                if doc is not None and doc.added_by == FOLDER:
                    await self.kb.remove(scope, name)
                return
            await self.index(scope, name, path)
        except Exception:  # noqa: BLE001 - one file must not stop the watch
            logger.exception("knowledge folder: %s/%s could not be handled", scope, name)
