"""The whole history, searchable by meaning: every stored user and assistant message gets an embedding, and
``history_search`` ranks by words and by meaning together (as ``memory_search`` does for the memory files).

**Indexing** runs in one background task (:meth:`HistoryIndex.start`), never on a turn's path: it reads
the messages that have no vector yet (store/message_vectors.py: the database is the queue, so it is
bounded, survives restarts and needs no memory), embeds them a small batch at a time on the embedding
model's own thread and stores int8 vectors; between batches it lets any running search go first
(memory/priority.py). A reply wakes it (the ``after_reply`` hook of the ``memory_index`` plugin); otherwise
it looks again every :data:`IDLE_SECONDS`. One vector per exchange (:func:`embed_texts`): a user message
with the bot's answer, texts cut at :data:`EMBED_TOKENS` and :data:`CONTEXT_TOKENS`; a message of filler
alone ("ok, noted") and tool calls and results are not embedded. The model's cost is the tokens embedded
(bench/memory_indexer.py), so each said thing is embedded once, not once alone and once as the context of
the next message. Messages not embedded yet are still found by their words. With
``memory_embedding_model`` off nothing is embedded and ``history_search`` stays full-text.

**Searching**: the database's full-text ranking (store/history_search.py) and a scan of the session's
vectors run side by side, then reciprocal rank fusion (memory/ranking.py). A session's vectors are loaded
into one int8 matrix on its first search and kept in step (only the rows added since are read); the
matrices of the sessions searched last are kept up to :data:`CACHE_BYTES` together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from core import heap
from memory.embeddings import BaseEmbedder, LocalEmbedder, quantise
from memory.priority import SearchFirst
from memory.ranking import fuse, top
from memory.search import terms
from store import message_vectors as mv
from store.history_search import HistoryHit, history_hits, message_text, rank_history
from store.search_terms import FILLER  # the words that carry nothing: one list, the words' index uses it too

if TYPE_CHECKING:
    from store.store import Store

logger = logging.getLogger(__name__)

#: Messages read per batch; the indexer lets a search go first between batches (memory/priority.py).
BATCH = 8
#: Seconds the indexer waits for a reply's wake-up before it looks for unindexed messages again.
IDLE_SECONDS = 30.0
#: Seconds the indexer waits after a failure (the database or the embeddings endpoint away).
RETRY_SECONDS = 30.0
#: The model's tokens (about: :func:`cut_tokens`) of a message embedded, and of the answer (or question) embedded
#: with it. The model's cost is its tokens' (bench/memory_indexer.py: ~1.4 ms of CPU a token), so a long answer
#: costs no more than this; a passage shows 360 characters of a message (store/history_search.py). On LoCoMo
#: (bench/memory_locomo.py, 3 conversations) 48 found as much as 160 with 9% fewer tokens; 32 lost multi-hop
#: questions (top-5 56% -> 51%). The answer's cap is not measured by LoCoMo (its answers are acknowledgements).
EMBED_TOKENS = 48
CONTEXT_TOKENS = 80
#: CJK characters are a token each for e5's tokenizer; other text is about 3.8 characters a token (LoCoMo).
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_CHARS_PER_TOKEN = 3.5
#: The share of the better neighbouring exchange's similarity added to an exchange's own (bench/memory_locomo_app.py).
NEIGHBOUR_WEIGHT = 0.8
#: Candidates each ranking brings to the fusion.
CANDIDATES = 50
#: The fusion's constant: small, so the head of each ranking counts most (60, memory_search's, found less on LoCoMo:
#: bench/memory_locomo.py, BENCHMARKS.md); 10 rather than 5 since history_search shows 10-15 results, not 5.
RRF_K = 10
#: Places a hit that ends in a question mark goes down in the ranking (:func:`questions_later`; 4 / 6 / 8: 78.3% /
#: 79.0% / 78.8% found on LoCoMo's conv-41..43, bench/memory_locomo.py).
QUESTION_PLACES = 6
#: A session of up to this many vectors is scanned on the event loop (~1.3 ms at 10,000), a larger one in a thread.
INLINE_SCAN = 10_000
#: Bytes of session matrices kept in memory together (the session searched last is kept whatever its size).
CACHE_BYTES = 48 * 1024 * 1024
#: two letters together, or one CJK character (a word alone: 猫)
_LETTERS = re.compile(r"[^\W\d_]{2,}|[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def has_content(body: str) -> bool:
    """True when ``body`` holds a word worth embedding (not only filler, stop words, numbers or emoji)."""
    return any(term not in FILLER and _LETTERS.search(term) for term in terms(body))


def cut_tokens(text: str, tokens: int) -> str:
    """The head of ``text`` that holds about ``tokens`` of the model's tokens (a CJK character is one, other
    characters :data:`_CHARS_PER_TOKEN` to a token), cut at a space when one is near the end."""
    if len(text) <= tokens:
        return text
    cjk = len(_CJK.findall(text))
    if cjk + (len(text) - cjk) / _CHARS_PER_TOKEN <= tokens:
        return text
    budget = float(tokens)
    for end, char in enumerate(text):
        budget -= 1.0 if _CJK.match(char) else 1 / _CHARS_PER_TOKEN
        if budget < 0:
            space = text.rfind(" ", 0, end)
            return text[:space] if space > end * 4 // 5 else text[:end]
    return text


def _flat(content: object, tokens: int) -> str:
    return cut_tokens(" ".join(message_text(content).split()), tokens)


def embed_texts(waiting: list[mv.PendingMessage]) -> list[tuple[mv.PendingMessage, str]]:
    """What is embedded for a batch of waiting messages: ``(message, text)`` rows, ``""`` for a row stored
    with an empty vector. One vector per exchange: a user message with the bot's answer after it (when the
    answer has content words), on the user message's row; the answer's row is empty. An answer whose
    question was embedded alone before it came (or an assistant message that answers nothing) gets its own
    vector, with the question before it. A text without content words is not embedded."""
    rows: list[tuple[mv.PendingMessage, str]] = []
    covered: set[int] = set()
    for message in waiting:
        if message.id in covered:
            continue
        body = _flat(message.content, EMBED_TOKENS)
        if message.role == "user":
            answer = message.next if message.next is not None and message.next.role == "assistant" else None
            text = body if has_content(body) else ""
            if answer is not None and not answer.indexed:
                reply = _flat(answer.content, CONTEXT_TOKENS)
                if has_content(reply):
                    text = f"{body}\n{reply}" if body else reply
                rows.append((message, text))
                rows.append((mv.PendingMessage(answer.id, message.session_id, answer.seq, answer.role, None), ""))
                covered.add(answer.id)
                continue
            rows.append((message, text))
            continue
        if not has_content(body):
            rows.append((message, ""))
            continue
        question = message.previous
        context = _flat(question.content, CONTEXT_TOKENS) if question is not None else ""
        rows.append((message, f"{context}\n{body}" if context else body))
    return rows


def questions_later(hits: list[HistoryHit]) -> list[HistoryHit]:
    """The hits with each message that ends in a question mark moved :data:`QUESTION_PLACES` places down.

    A question is near a question in meaning ("what did John do?" beside "Wow, John! What inspired you?"),
    and it asks more often than it tells; the output holds ~12 hits, so those questions took the places of
    the statements that answer (bench/memory_locomo.py, conv-41..43: 77.5% -> 79.0% found, each of the
    three higher). Moved, not dropped: many messages tell something and then ask ("I lost my job. How are
    you?"), and dropping them all found less (74%)."""
    places = [i + (QUESTION_PLACES if hit.passage.rstrip().endswith("?") else 0) for i, hit in enumerate(hits)]
    return [hits[i] for i in sorted(range(len(hits)), key=places.__getitem__)]


@dataclass
class SessionVectors:
    """One session's vectors as an int8 matrix that grows in place, with each row's seq and scale."""

    dim: int
    low_id: int = 0
    high_id: int = 0
    size: int = 0
    seqs: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    scales: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    matrix: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int8))

    @property
    def nbytes(self) -> int:
        """Memory held (capacity, not only the rows in use)."""
        return self.seqs.nbytes + self.scales.nbytes + self.matrix.nbytes

    def extend(self, rows: mv.VectorRows) -> None:
        """Append rows (newer messages than any held)."""
        n = len(rows.ids)
        if not n:
            return
        if self.size + n > len(self.seqs):
            capacity = max(self.size + n, int(len(self.seqs) * 1.5), 64)
            self.seqs = np.resize(self.seqs, capacity)
            self.scales = np.resize(self.scales, capacity)
            grown = np.zeros((capacity, self.dim), dtype=np.int8)
            if self.size:
                grown[:self.size] = self.matrix[:self.size]
            self.matrix = grown
        end = self.size + n
        self.seqs[self.size:end] = rows.seqs
        self.scales[self.size:end] = rows.scales
        self.matrix[self.size:end] = np.frombuffer(b"".join(rows.vectors), dtype=np.int8).reshape(n, self.dim)
        self.size = end
        self.low_id = self.low_id or rows.ids[0]
        self.high_id = rows.ids[-1]

    def ranking(self, query: np.ndarray, before_seq: int | None, limit: int = CANDIDATES) -> list[int]:
        """Seqs by cosine similarity to ``query`` (a unit vector), best first; only seqs before ``before_seq``."""
        if not self.size or query.shape[-1] != self.dim:
            return []
        n = int(np.searchsorted(self.seqs[:self.size], before_seq)) if before_seq else self.size
        q8, _ = quantise(query[None, :])
        # int8 rows times the int8 query, summed in int32: a quarter of float32's memory, and no float copy
        sims = np.einsum("ij,j->i", self.matrix[:n], q8[0], dtype=np.int32, casting="unsafe")
        own = sims.astype(np.float32) * self.scales[:n]
        # each exchange ranked with its neighbours: the better of the exchanges before and after it adds a part
        # of its similarity ("Yes, last June" is found through the question before it)
        near = np.full_like(own, -1.0)
        if n > 1:
            near[1:] = own[:-1]
            near[:-1] = np.maximum(near[:-1], own[1:])
        scores = own + NEIGHBOUR_WEIGHT * np.maximum(near, 0.0)
        return [int(self.seqs[i]) for i in top(scores, limit, above=float("-inf"))]


class HistoryIndex:
    """The vectors of every stored turn: the background indexer and the hybrid search over them."""

    def __init__(self, store: Store, embedder: BaseEmbedder | None = None) -> None:
        self.store = store
        self.embedder = embedder
        #: the settings the embedder was built from (the memory_index plugin compares them)
        self.embedder_settings: tuple[str, str, str] | None = None
        self._cache: OrderedDict[str, SessionVectors] = OrderedDict()
        #: one lock per session being read: three chats' first searches read their own sessions side by side
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        #: the model whose name the stored vectors were last checked against (those of another are deleted)
        self._checked_model = ""
        #: searches hold the indexers back (shared with memory_search's, memory/priority.py)
        self.priority = SearchFirst()

    @property
    def model_name(self) -> str:
        """The embedding model's name ("" when semantic search is off)."""
        return self.embedder.name if self.embedder is not None else ""

    def set_embedder(self, embedder: BaseEmbedder | None) -> None:
        """Use another embedder (a change of ``memory_embedding_model``): the cached matrices go, and the
        indexer embeds the stored messages again (:meth:`start`)."""
        self.embedder = embedder
        self._cache.clear()

    # --- the indexer ----------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the background indexer (nothing when semantic search is off or it runs already)."""
        if self.embedder is None or (self._task is not None and not self._task.done()):
            return
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="history index")

    def wake(self) -> None:
        """New messages were stored: index them soon (starts the indexer when it is not running)."""
        self.start()
        if self._wake is not None:
            self._wake.set()

    async def stop(self) -> None:
        """Stop the indexer (at a stop, before the database closes); unindexed messages wait for the next start."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def index_pending(self, limit: int = BATCH) -> int:
        """Embed and store one batch of messages without a vector; the messages handled (0: none waiting)."""
        embedder = self.embedder
        if embedder is None:
            return 0
        waiting = await self.store.database.run_long(mv.pending, limit)
        if not waiting:
            return 0
        planned = embed_texts(waiting)
        full = [i for i, (_, t) in enumerate(planned) if t]
        vectors = await self._embed([planned[i][1] for i in full]) if full else np.zeros((0, 0), dtype=np.float32)
        q8, scales = quantise(vectors) if full else (np.zeros((0, 0), dtype=np.int8), np.zeros(0, dtype=np.float32))
        rows: list[tuple[mv.PendingMessage, float, bytes]] = [(m, 0.0, b"") for m, _ in planned]
        for row, i in enumerate(full):
            rows[i] = (planned[i][0], float(scales[row]), q8[row].tobytes())
        await self.store.run(mv.save, embedder.name, rows)
        return len(rows)

    async def _embed(self, texts: list[str]) -> np.ndarray:
        """The passages' vectors; with the local model one text per call into its thread, and a search that
        starts meanwhile goes first (memory/priority.py): a batch in flight holds the engine for one text
        (~50 ms of CPU), not for the whole batch, beside a question's embedding."""
        assert self.embedder is not None
        if not isinstance(self.embedder, LocalEmbedder):
            return await self.embedder.embed(texts)
        parts = []
        for text in texts:
            await self.priority.wait_turn()
            parts.append(await self.embedder.embed([text]))
        return np.concatenate(parts)

    async def catch_up(self) -> int:
        """Index every message without a vector now (tests, benchmarks); the messages handled."""
        if self.embedder is not None and self._checked_model != self.embedder.name:
            # once per model and process: this scans the table
            while await self.store.run(mv.drop_other_models, self.embedder.name):
                pass
            self._checked_model = self.embedder.name
        done = 0
        while True:
            await self.priority.wait_turn()  # a search goes first (memory/priority.py)
            n = await self.index_pending()
            if not n:
                return done
            done += n

    async def _run(self) -> None:
        assert self._wake is not None
        wake = self._wake
        while True:
            if self.store.database is None:  # the store was closed without stopping the indexer first
                return
            try:
                done = await self.catch_up()
                if done:
                    logger.info("history index: %d messages embedded", done)
                    await asyncio.to_thread(heap.trim)  # the batches' buffers, before the indexer idles
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the indexer outlives an outage; full-text search still answers
                if self.store.database is None:
                    return
                logger.exception("history index: embedding stored messages failed; trying again in %.0f s",
                                 RETRY_SECONDS)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation that meets the end of
            # the wait (a stop just as a reply's wake-up comes), and stop() then waited for this loop for ever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(IDLE_SECONDS):
                    await wake.wait()
            wake.clear()

    # --- the search -----------------------------------------------------------------------------------
    async def vectors(self, session_id: str) -> SessionVectors:
        """The session's matrix, brought up to date with the stored vectors."""
        low, high = await self.store.run(mv.stamp, session_id)
        cached = self._cache.get(session_id)
        if cached is not None and cached.low_id == low and cached.high_id == high:
            self._cache.move_to_end(session_id)
            return cached
        lock, users = self._locks.get(session_id, (asyncio.Lock(), 0))
        self._locks[session_id] = (lock, users + 1)
        try:
            async with lock:
                return await self._read_vectors(session_id, low, high)
        finally:
            lock, users = self._locks[session_id]
            if users > 1:
                self._locks[session_id] = (lock, users - 1)
            else:
                del self._locks[session_id]

    async def _read_vectors(self, session_id: str, low: int, high: int) -> SessionVectors:
        """Read the session's vectors added since its cached matrix (all of them the first time)."""
        cached = self._cache.get(session_id)
        if cached is None or cached.low_id != low:
            cached = SessionVectors(0)
        rows = await self.store.database.run_long(mv.load, session_id, self.model_name, cached.high_id)
        if rows.vectors and len(rows.vectors[0]) != cached.dim:
            if cached.size:  # another model's width (a change of model): read them all again
                cached = SessionVectors(0)
                rows = await self.store.database.run_long(mv.load, session_id, self.model_name, 0)
            cached.dim = len(rows.vectors[0]) if rows.vectors else 0
        await asyncio.to_thread(cached.extend, rows)
        cached.low_id, cached.high_id = low, max(high, cached.high_id)
        self._cache[session_id] = cached
        self._cache.move_to_end(session_id)
        while len(self._cache) > 1 and sum(v.nbytes for v in self._cache.values()) > CACHE_BYTES:
            self._cache.popitem(last=False)
        return cached

    def forget(self, session_id: str) -> None:
        """Drop the session's cached matrix (after /forget)."""
        self._cache.pop(session_id, None)

    async def search(self, session_id: str, query: str, limit: int,
                     before_seq: int | None = None, near: int | None = None) -> list[HistoryHit]:
        """The session's messages best matching ``query`` by words and by meaning, best first; full-text only
        when semantic search is off or the query cannot be embedded. ``near``: only the first ``near`` hits come
        with their neighbouring turns (all when None; full-text only: all)."""
        async with self.priority.searching():
            return await self._search(session_id, query, limit, before_seq, near)

    async def _search(self, session_id: str, query: str, limit: int, before_seq: int | None,
                      near: int | None) -> list[HistoryHit]:
        if self.embedder is None:
            return await self.store.sessions.search_history(session_id, query, limit, before_seq)
        # the model embeds the query (the longest part) while the database ranks by words and the session's
        # vectors are brought up to date, then scanned
        asked = asyncio.ensure_future(self._question(session_id, query))
        try:
            held = await self.vectors(session_id)
            words = await self.store.database.run_long(rank_history, session_id, query, CANDIDATES, before_seq)
            query_vector = await asked
        except BaseException:
            asked.cancel()
            raise
        meaning: list[int] = []
        if query_vector is not None:
            # a small session's scan (~0.4 ms at 2,000 rows) costs less than a hop to a thread and back
            meaning = (held.ranking(query_vector, before_seq) if held.size <= INLINE_SCAN else
                       await asyncio.to_thread(held.ranking, query_vector, before_seq))
        order = [seq for seq, _ in fuse(words, meaning, k=RRF_K)[:limit]]
        return questions_later(await self.store.database.run_long(history_hits, session_id, order, query,
                                                                  before_seq, near))

    async def _question(self, session_id: str, query: str) -> np.ndarray | None:
        """The query's vector (None when it cannot be embedded)."""
        assert self.embedder is not None
        try:
            return await self.embedder.embed_query(query)
        except Exception:  # noqa: BLE001 - the words still answer
            logger.exception("session %s: embedding a history query failed; full-text search only", session_id)
            return None
