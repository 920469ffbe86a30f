"""The knowledge base of one bot: adding, removing, listing and searching documents (DESIGN §14).

Adding a document is: the size cap, its sha256 (the same bytes under the same name in the same scope are not
indexed again), parsing and chunking in a worker thread (:mod:`knowledge.parse`, :mod:`knowledge.chunk`), the
chunks embedded with the memory's embedder (``memory_embedding_model``; int8 vectors, as ``message_vectors``),
then one transaction that replaces the document of that name (store/knowledge.py). Anything that goes wrong
before that transaction raises :class:`Refused` with a sentence for the person, and nothing changes.

Searching loads the chunks of the chat's scopes once per change of their documents (every process reads the same
tables, so a document added through another process is found after its next stamp check).

Every turn asks for its chat's documents (:meth:`KnowledgeBase.chat_documents`, the system prompt's section). While
the knowledge base holds no document at all, a process asks the database whether one exists at most once every
:data:`EMPTY_RECHECK` seconds and reads nothing in between: a bot that does not use the knowledge base pays no query
a turn. A document added through this process counts at once; one added through another process within that time.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from knowledge.chunk import Chunk, chunk, citation
from knowledge.parse import Parsed, Unreadable, parse
from knowledge.scopes import chat_key, chat_scopes, valid_scope
from knowledge.search import Hit, KnowledgeCorpus
from memory.embeddings import quantise
from store.knowledge import Document, KnowledgeStore, NewChunk

if TYPE_CHECKING:
    from config.settings import Config
    from memory.embeddings import BaseEmbedder
    from store.store import Store

logger = logging.getLogger(__name__)

#: Passages a search returns.
TOP_K = 5
#: Corpora (sets of scopes) kept in memory.
CACHED_CORPORA = 32
#: A passage shown to the model is cut to this many characters.
PASSAGE_CHARS = 1500
MB = 1024 * 1024
#: Seconds a process trusts that the knowledge base held no document when it last looked (see above).
EMPTY_RECHECK = 5.0


class Refused(Exception):
    """A document was not added; the message says why, for the person who sent it."""


@dataclass(frozen=True, slots=True)
class Added:
    """What adding a document did: the stored document, and whether it was already there unchanged."""

    document: Document
    unchanged: bool = False
    replaced: bool = False


def too_large(size: int, max_mb: int) -> str | None:
    """The refusal for a file of ``size`` bytes, or None when it is within ``knowledge_max_mb``."""
    if max_mb > 0 and size > max_mb * MB:
        return (f"it is {size / MB:,.1f} MB; the knowledge base takes documents of at most {max_mb} MB "
                "(knowledge_max_mb)")
    return None


def format_hits(hits: list[Hit]) -> str:
    """Passages for the model, each starting with its citation."""
    blocks = []
    for hit in hits:
        text = hit.text if len(hit.text) <= PASSAGE_CHARS else hit.text[:PASSAGE_CHARS].rstrip() + " …"
        blocks.append(f"{citation(hit.document, hit.page, hit.section)} {text}")
    return "\n\n".join(blocks)


class KnowledgeBase:
    """Documents and their chunks in the database, searched by words and meaning."""

    def __init__(self, store: Store, config: Callable[[], Config],
                 embedder: Callable[[], BaseEmbedder | None] = lambda: None) -> None:
        self.tables = KnowledgeStore(store)
        self.config = config
        self.embedder = embedder
        self._cache: OrderedDict[tuple[str, ...], tuple[tuple[int, int, str, str], KnowledgeCorpus]] = OrderedDict()
        self._lock = asyncio.Lock()
        #: documents being added now, by (scope, name): a second add of the same waits for the first
        self._adding: dict[tuple[str, str], asyncio.Lock] = {}
        #: when (``clock()``) the database last said whether any document exists, and what it said
        self.clock: Callable[[], float] = time.monotonic
        self._looked: tuple[float, bool] | None = None

    def model_name(self) -> str:
        """The embedding model's name, or "" when semantic search is off."""
        embedder = self.embedder()
        return embedder.name if embedder is not None else ""

    # --- scopes ------------------------------------------------------------------------------------------
    async def scopes_for(self, channel: str, chat_id: str, is_group: bool) -> list[str]:
        """The scopes a chat may search: ``global``, its own (groups), and those granted to it."""
        return chat_scopes(channel, chat_id, is_group, await self.tables.grants(chat_key(channel, chat_id)))

    async def chat_documents(self, channel: str, chat_id: str, is_group: bool) -> tuple[list[str], list[Document]]:
        """The scopes a chat may search (as :meth:`scopes_for`) and their documents (as :meth:`documents`), in
        one transaction (every turn asks). No document: the scopes without the chat's grants, which are then not
        read, and no query at all while the knowledge base is known to be empty (module docstring)."""
        if not await self._any_document():
            return chat_scopes(channel, chat_id, is_group, []), []
        granted, docs = await self.tables.chat_documents(chat_key(channel, chat_id),
                                                         chat_scopes(channel, chat_id, is_group, []))
        scopes = chat_scopes(channel, chat_id, is_group, granted)
        if not docs:
            return scopes, []
        return scopes, [d for d in docs if d.scope in scopes]  # a granted group's own scope is never searched

    async def _any_document(self) -> bool:
        """Whether any scope holds a document, as the database said at most :data:`EMPTY_RECHECK` seconds ago (or
        since this process last added one)."""
        now = self.clock()
        looked = self._looked
        if looked is not None and now - looked[0] < EMPTY_RECHECK:
            return looked[1]
        found = await self.tables.any_document()
        if self._looked is looked:  # else an add (or another turn's look) answered meanwhile: that answer stands
            self._looked = (now, found)
        latest = self._looked
        return latest[1] if latest is not None else found

    # --- adding ------------------------------------------------------------------------------------------
    async def add(self, scope: str, name: str, data: bytes, added_by: str) -> Added:
        """Index a document into ``scope``; raise :class:`Refused` (nothing changed) when it cannot be."""
        cfg = self.config()
        name = clean_name(name)
        if not valid_scope(scope):
            raise Refused(f"{scope!r} cannot name a scope (letters, digits, '-', '_' and '.')")
        if not name:
            raise Refused("the document has no name")
        reason = too_large(len(data), cfg.knowledge_max_mb)
        if reason:
            raise Refused(f"{name} was not added: {reason}")
        digest = hashlib.sha256(data).hexdigest()
        lock = self._adding.setdefault((scope, name), asyncio.Lock())
        async with lock:
            old = await self.tables.find(scope, name)
            if old is not None and old.sha256 == digest and old.chunks:
                return Added(old, unchanged=True)
            try:
                parsed: Parsed = await asyncio.to_thread(parse, data, name, max_pages=cfg.knowledge_max_pages)
            except Unreadable as exc:
                raise Refused(f"{name} was not added: {exc}") from exc
            chunks = await asyncio.to_thread(chunk, parsed)
            rows = await self._embed(name, chunks)
            doc = await self.tables.replace(scope, name, digest, parsed.kind, parsed.pages, added_by, rows)
            self._looked = (self.clock(), True)  # the next turn reads this chat's documents
        self._adding.pop((scope, name), None)
        logger.info("knowledge: %s added to %s (%s, %d pages, %d chunks) by %s", name, scope, parsed.kind,
                    doc.pages, doc.chunks, added_by)
        return Added(doc, replaced=old is not None)

    async def _embed(self, name: str, chunks: list[Chunk]) -> list[NewChunk]:
        embedder = self.embedder()
        vectors = None
        if embedder is not None and chunks:
            try:
                vectors = await embedder.embed([c.indexed_text() for c in chunks])
            except Exception:  # noqa: BLE001 - words still find the passages
                logger.exception("knowledge: embedding %s failed; stored for word search only", name)
        if vectors is None:
            return [NewChunk(page=c.page, section=c.section, text=c.text) for c in chunks]
        ints, scales = quantise(vectors)
        model = embedder.name if embedder is not None else ""
        return [NewChunk(page=c.page, section=c.section, text=c.text, model=model, scale=float(scales[i]),
                         vector=ints[i].tobytes()) for i, c in enumerate(chunks)]

    async def remove(self, scope: str, name: str) -> Document | None:
        """Delete a document and its chunks; None when the scope has none of that name."""
        doc = await self.tables.remove(scope, clean_name(name))
        if doc is not None:
            logger.info("knowledge: %s removed from %s", doc.name, scope)
        return doc

    async def documents(self, scopes: list[str] | None = None) -> list[Document]:
        """The documents of ``scopes`` (None: every scope)."""
        return await self.tables.documents(scopes)

    # --- searching ---------------------------------------------------------------------------------------
    async def corpus(self, scopes: list[str]) -> KnowledgeCorpus:
        """The chunks of ``scopes``, loaded again only when their documents changed."""
        key = tuple(sorted(scopes))
        model = self.model_name()
        stamp = (*await self.tables.stamp(list(key)), model)
        cached = self._cache.get(key)
        if cached is not None and cached[0] == stamp:
            self._cache.move_to_end(key)
            return cached[1]
        async with self._lock:
            rows = await self.tables.load_chunks(list(key))
            corpus = await asyncio.to_thread(KnowledgeCorpus.build, rows, model)
            self._cache[key] = (stamp, corpus)
            self._cache.move_to_end(key)
            while len(self._cache) > CACHED_CORPORA:
                self._cache.popitem(last=False)
        return corpus

    async def search(self, scopes: list[str], query: str, k: int = TOP_K, *, words: bool = True,
                     meaning: bool = True) -> list[Hit]:
        """The ``k`` best passages of these scopes for ``query``."""
        if not query.strip() or not scopes:
            return []
        corpus = await self.corpus(scopes)
        if not corpus.rows:
            return []
        vector = None
        embedder = self.embedder()
        if meaning and embedder is not None and len(corpus.vector_rows):
            try:
                vector = np.asarray(await embedder.embed_query(query), dtype=np.float32)
            except Exception:  # noqa: BLE001 - the words still answer
                logger.exception("knowledge: embedding the query failed; word search only")
        return corpus.search(query, vector, k, words=words)

    async def has_documents(self, scopes: list[str]) -> bool:
        """Whether any of these scopes holds a document."""
        return (await self.tables.stamp(scopes))[0] > 0


def clean_name(name: str) -> str:
    """A document's name: the file name without folders, control characters or surrounding spaces."""
    name = name.replace("\\", "/").rsplit("/", 1)[-1]
    return "".join(ch for ch in name if ch.isprintable()).strip()[:255]
