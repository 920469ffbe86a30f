"""Text embeddings for semantic memory search (``memory_embedding_model``, DESIGN §1.2).

``"local"`` is wordllama's bundled model (256 dimensions, weights inside the wheel), read in place
(:class:`WordLlamaModel`): no key, no network.
Any other non-empty value names an embeddings model at ``open_ai_api_base``, called through the
``openai`` SDK. ``""`` turns semantic search off (:func:`build_embedder` returns None).

Every embedder returns L2-normalised float32 rows, so a dot product is the cosine similarity.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import math
import struct
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

LOCAL = "local"
#: wordllama's configuration and dimension bundled in its wheel (its files are named after them).
WORDLLAMA_CONFIG = "l2_supercat"
WORDLLAMA_DIM = 256
#: The name stored with each vector, so a change of model is noticed (``/memory rebuild``).
LOCAL_MODEL_NAME = f"local:wordllama-{WORDLLAMA_CONFIG}-{WORDLLAMA_DIM}"


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


class BaseEmbedder(ABC):
    """Turns texts into unit vectors. ``name`` is stored with every vector; ``dim`` is 0 until known."""

    name: str = ""
    dim: int = 0

    @abstractmethod
    async def embed(self, texts: list[str]) -> np.ndarray:
        """The ``(len(texts), dim)`` float32 matrix of unit vectors."""


# --- local: wordllama ----------------------------------------------------------------------------------
_MODEL: Any = None
_MODEL_LOCK = threading.Lock()
#: safetensors dtype names and numpy's (little-endian, as the format stores them)
_SAFETENSORS_DTYPES = {"F16": "<f2", "F32": "<f4", "F64": "<f8"}


def wordllama_files() -> tuple[Path, Path]:
    """The tokenizer and the weights inside the installed wordllama wheel, found without importing it."""
    spec = importlib.util.find_spec("wordllama")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("wordllama is not installed (pip install -r requirements.txt)", name="wordllama")
    folder = Path(next(iter(spec.submodule_search_locations)))
    return (folder / "tokenizers" / f"{WORDLLAMA_CONFIG}_tokenizer_config.json",
            folder / "weights" / f"{WORDLLAMA_CONFIG}_{WORDLLAMA_DIM}.safetensors")


def map_tensor(path: Path, name: str) -> np.ndarray:
    """One tensor of a safetensors file as a read-only memory map (the format: an 8-byte little-endian
    header size, a JSON header with each tensor's dtype, shape and byte offsets, then the data)."""
    with open(path, "rb") as fh:
        (size,) = struct.unpack("<Q", fh.read(8))
        info = json.loads(fh.read(size))[name]
    dtype = np.dtype(_SAFETENSORS_DTYPES[info["dtype"]])
    shape = tuple(info["shape"])
    start, end = info["data_offsets"]
    if end - start != dtype.itemsize * math.prod(shape):
        raise ValueError(f"{path}: tensor {name!r} has {end - start} bytes, not {shape} of {dtype}")
    return np.memmap(path, dtype=dtype, mode="r", offset=8 + size + start, shape=shape)



class WordLlamaModel:
    """wordllama's embedding: the mean of the token vectors of a text, from its bundled tokenizer and weights.

    The same computation as ``wordllama.WordLlamaInference.embed`` (float32 means of the float16 token
    vectors; the tests check the vectors against the package's own). Its loader is not used: it imports
    the whole package (a download client and text algorithms the bot never calls) and keeps a float32 copy
    of the weights. Here the weights stay a read-only memory map of the wheel's file: pages are read as
    tokens are met, are shared by every bot process on the machine, and the kernel can drop them under
    memory pressure. Texts are pooled one at a time, so a batch of long texts never holds all their token
    vectors at once (wordllama pads a batch of 64 to its longest text).
    """

    #: texts per call of the tokenizer (which splits a batch over its own threads)
    batch = 64

    def __init__(self, tokenizer: Any, weights: np.ndarray) -> None:
        self.tokenizer = tokenizer
        self.weights = weights

    @classmethod
    def load(cls) -> WordLlamaModel:
        """The bundled model; reads only the installed files, never the network."""
        from tokenizers import Tokenizer

        tokenizer_path, weights_path = wordllama_files()
        tokenizer = Tokenizer.from_file(str(tokenizer_path))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        return cls(tokenizer, map_tensor(weights_path, "embedding.weight"))

    def embed(self, texts: list[str]) -> np.ndarray:
        """The ``(len(texts), dim)`` float32 matrix of mean token vectors (not normalised; zero for no tokens)."""
        out = np.zeros((len(texts), self.weights.shape[1]), dtype=np.float32)
        top = self.weights.shape[0] - 1
        for start in range(0, len(texts), self.batch):
            encoded = self.tokenizer.encode_batch(texts[start:start + self.batch], add_special_tokens=False)
            for row, encoding in enumerate(encoded, start):
                if encoding.ids:
                    ids = np.clip(np.array(encoding.ids, dtype=np.int64), 0, top)
                    out[row] = self.weights[ids].sum(axis=0, dtype=np.float32) / np.float32(len(ids))
        return out


def load_wordllama() -> WordLlamaModel:
    """wordllama's bundled model, loaded once per process."""
    global _MODEL
    with _MODEL_LOCK:
        if _MODEL is None:
            _MODEL = WordLlamaModel.load()
            logger.info("semantic memory: local embedding model loaded (%s)", LOCAL_MODEL_NAME)
        return _MODEL


class LocalEmbedder(BaseEmbedder):
    """wordllama's bundled model, loaded lazily off the event loop."""

    name = LOCAL_MODEL_NAME
    dim = WORDLLAMA_DIM

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        """Embed on the calling thread (loads the model on first use)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return normalise(load_wordllama().embed(list(texts)))

    async def embed(self, texts: list[str]) -> np.ndarray:
        """Embed in a worker thread: loading and pooling are CPU work that must not stall the loop."""
        return await asyncio.to_thread(self.embed_sync, texts)


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
