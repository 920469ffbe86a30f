"""Built-in plugin: the semantic memory index (DESIGN §1.8, §6).

It indexes what the summariser and ``memory_write`` write (the ``memory_written`` hook) and makes the
hybrid search the one ``memory_search`` uses for this bot's data folder. It also runs the indexer of every
stored turn (memory/history_index.py), which a reply wakes (``after_reply``), for ``history_search``.
The embedder follows ``memory_embedding_model`` (and the endpoint settings) as they are when it is next
needed.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from memory.daily import LONG_TERM_FILE, DailyMemory
from memory.embeddings import build_embedder
from memory.history_index import HistoryIndex
from memory.index import MemoryIndex
from memory.search import MemorySearch
from plugins.hookspecs import hookimpl

if TYPE_CHECKING:
    from config.settings import Config
    from dispatcher.commands import Services

logger = logging.getLogger(__name__)


def embedding_settings(cfg: Config) -> tuple[str, str, str]:
    """What the embedder depends on: the model setting, the endpoint and its key."""
    return cfg.memory_embedding_model, cfg.open_ai_api_base, cfg.open_ai_api_key


def searcher(services: Services) -> MemorySearch:
    """This bot's memory search (created on first use), its embedder matching the settings in force."""
    cfg = services.config()
    found: MemorySearch | None = services.memory_search
    if found is None:
        memory = DailyMemory(cfg.data_path() / "memory", cfg.zone())
        found = services.memory_search = MemorySearch(MemoryIndex(services.store, None, memory))
    settings = embedding_settings(cfg)
    if found.index.embedder_settings != settings:
        model, base_url, api_key = settings
        found.index.embedder = build_embedder(model, base_url=base_url, api_key=api_key)
        found.index.embedder_settings = settings
        logger.info("semantic memory: embedding model %s", found.index.model_name or "off (keywords only)")
    turns: HistoryIndex | None = services.history_index
    if turns is None:
        turns = services.history_index = HistoryIndex(services.store)
    found.priority = turns.priority  # one order of priority for both searches and both indexers
    if turns.embedder_settings != settings:  # the same embedder (and model thread) as the memory files'
        turns.set_embedder(found.index.embedder)
        turns.embedder_settings = settings
    return found


def history_index(services: Services) -> HistoryIndex:
    """This bot's index of stored turns, its embedder matching the settings in force."""
    searcher(services)
    assert services.history_index is not None
    return services.history_index


@hookimpl
def register_tools(services) -> None:
    """Attach this bot's search before any tool runs (memory_search itself is registered by ``tools``)."""
    searcher(services)


@hookimpl
def after_reply(services) -> None:
    """Wake the turn indexer: the turn's messages are embedded in the background, after the reply (and the
    indexer started, catching up on what was stored while the bot was down)."""
    history_index(services).wake()


@hookimpl
def memory_written(session_id, kind, text, path, services) -> None:
    """Index a summary section or a note as it is written; the injected rolling summary repeats them, so not it.

    The indexing (which may load the embedding model first) runs in the background: it must never delay
    the summary's injection or a reply. A graceful stop waits for it (:func:`stopping`).
    """
    if kind not in ("summary", "note") or not text:
        return
    task = asyncio.create_task(index_written(session_id, kind, text, path, services),
                               name=f"memory index {session_id}")
    tasks = searcher(services).index.pending
    tasks.add(task)
    task.add_done_callback(_indexed)
    task.add_done_callback(tasks.discard)


async def index_written(session_id: str, kind: str, text: str, path: Path, services: Services) -> None:
    """Index one written summary section or note now."""
    if kind not in ("summary", "note") or not text:
        return
    source = Path(path).name if path else (LONG_TERM_FILE if kind == "note" else "")
    if source:
        await searcher(services).index.add(session_id, kind, text, source)


async def wait_indexed(services: Services) -> None:
    """Wait until every background indexing started so far is done (tests, shutdown)."""
    tasks = services.memory_search.index.pending if services.memory_search is not None else None
    if tasks:
        await asyncio.gather(*set(tasks), return_exceptions=True)


@hookimpl
async def stopping(services) -> None:
    """At a stop, after the last summaries: what they wrote is indexed before the database closes; the turn
    indexer and the background embedding of memory passages stop (what they have not embedded yet waits for
    the next start)."""
    await wait_indexed(services)
    if services.memory_search is not None:
        await services.memory_search.stop()
    if services.history_index is not None:
        await services.history_index.stop()


def _indexed(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("semantic memory: indexing failed", exc_info=task.exception())
