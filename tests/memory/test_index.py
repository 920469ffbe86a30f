"""The memory index: chunking, storing passages with vectors per session, rebuild, delete; both backends."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path

import numpy as np

from memory.daily import DailyMemory
from memory.embeddings import BaseEmbedder, from_bytes, normalise
from memory.index import MemoryIndex, chunk_text, date_of, delete_session_chunks
from tests.fakes.embeddings_server import fake_vector

A, B = "telegram:1", "telegram:2"


class HashEmbedder(BaseEmbedder):
    """Deterministic vectors (the fake server's), counting calls; ``fail`` makes it raise."""

    name = "hash-8"
    dim = 8

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.fail = False

    async def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        if self.fail:
            raise ConnectionError("embedder down")
        return normalise(np.array([fake_vector(t, self.dim) for t in texts]))


def test_chunk_text_keeps_lines_drops_headers_and_cuts_long_ones() -> None:
    text = ("# Daily Memory: 2026-03-01\n\n## Trimmed Context (14:05)\n\n- Alice likes tea.\n"
            "  * (kept) 42 EUR\n\n1. one\n")
    assert chunk_text(text) == ["Alice likes tea.", "(kept) 42 EUR", "one"]
    long = "First sentence here. " * 40
    parts = chunk_text(long, max_chars=100)
    assert all(len(p) <= 100 for p in parts) and all(p.endswith(".") for p in parts)
    assert " ".join(parts) == long.strip()
    assert chunk_text("x" * 250, max_chars=100) == ["x" * 100, "x" * 100, "x" * 50]


def test_date_of() -> None:
    assert [date_of(n) for n in ("2026-03-01.md", "MEMORY.md", "2026-02-30.md")] == ["2026-03-01", "", ""]


async def test_add_embeds_once_per_text_and_keeps_sessions_apart(store, tmp_path: Path) -> None:
    embedder = HashEmbedder()
    index = MemoryIndex(store, embedder, DailyMemory(tmp_path, UTC))
    text = "- Alice likes tea.\n- Bob owes 5 EUR.\n- Alice likes tea."
    assert await index.add(A, "summary", text, "2026-03-01.md") == 2
    assert await index.add(A, "note", "- Alice likes tea.", "MEMORY.md") == 0  # already indexed
    assert await index.add(B, "note", "- Alice likes tea.", "MEMORY.md") == 1  # another session
    rows = await index.load(A)
    assert [(r.source, r.kind, r.text, r.model, r.dim) for r in rows] == [
        ("2026-03-01.md", "summary", "Alice likes tea.", "hash-8", 8),
        ("2026-03-01.md", "summary", "Bob owes 5 EUR.", "hash-8", 8)]
    stored = from_bytes([r.vector for r in rows], 8)
    np.testing.assert_allclose(stored, normalise(np.array([fake_vector(r.text, 8) for r in rows])), rtol=1e-6)
    assert await index.stamp(A) == (2, rows[-1].id)
    assert await index.models(A) == {"hash-8": 2}


async def test_passages_are_kept_without_vector_when_embedding_fails_or_is_off(store, tmp_path: Path) -> None:
    embedder = HashEmbedder()
    embedder.fail = True
    index = MemoryIndex(store, embedder, DailyMemory(tmp_path, UTC))
    assert await index.add(A, "note", "- The vault code is 4711.", "MEMORY.md") == 1
    off = MemoryIndex(store, None, DailyMemory(tmp_path, UTC))
    assert await off.add(A, "note", "- Carol is vegan.", "MEMORY.md") == 1
    assert [(r.text, r.model, r.vector) for r in await index.load(A)] == [
        ("The vault code is 4711.", "", None), ("Carol is vegan.", "", None)]
    assert await index.models(A) == {"": 2}


async def test_rebuild_reindexes_the_files_with_the_current_model(store, tmp_path: Path) -> None:
    memory = DailyMemory(tmp_path, UTC)
    folder = memory.session_dir(A)
    folder.mkdir(parents=True)
    (folder / "2026-03-02.md").write_text("# Daily Memory: 2026-03-02\n\n## Compacted (10:00)\n\n- B fact\n")
    (folder / "2026-03-01.md").write_text("# Daily Memory: 2026-03-01\n\n## Trimmed Context (09:00)\n\n- A fact\n")
    (folder / "MEMORY.md").write_text("- a note\n- A fact\n")
    (folder / "notes.txt").write_text("not memory\n")
    old = MemoryIndex(store, None, memory)
    await old.add(A, "note", "- stale passage", "MEMORY.md")
    index = MemoryIndex(store, HashEmbedder(), memory)
    assert [p.name for p in index.files(A)] == ["2026-03-01.md", "2026-03-02.md", "MEMORY.md"]
    assert await index.rebuild(A) == (1, 3)
    assert [(r.source, r.kind, r.text, r.model) for r in await index.load(A)] == [
        ("2026-03-01.md", "summary", "A fact", "hash-8"), ("2026-03-02.md", "summary", "B fact", "hash-8"),
        ("MEMORY.md", "note", "a note", "hash-8")]
    assert index.files(B) == []


async def test_delete_session_chunks_for_cleanup(store, tmp_path: Path) -> None:
    index = MemoryIndex(store, None, DailyMemory(tmp_path, UTC))
    for sid in (A, B, "telegram:3"):
        await index.add(sid, "note", f"- fact of {sid}\n- second", "MEMORY.md")
    assert await store.run(delete_session_chunks, [A, "telegram:3"]) == 4
    assert await store.run(delete_session_chunks, []) == 0
    assert await index.stamp(A) == (0, 0)
    assert [r.text for r in await index.load(B)] == [f"fact of {B}", "second"]
    assert await index.delete(B) == 2


async def test_cleanup_of_expired_sessions_deletes_their_index(store, tmp_path: Path) -> None:
    from datetime import datetime, timedelta

    from core.records import SessionInfo

    index = MemoryIndex(store, None, DailyMemory(tmp_path, UTC))
    for sid in (A, B):
        await store.sessions.ensure(SessionInfo(session_id=sid, channel="telegram", chat_id=sid[-1]))
        await index.add(sid, "note", f"- fact of {sid}", "MEMORY.md")
    await store.run(lambda conn: conn.exec_driver_sql(
        "UPDATE sessions SET last_active = '2000-01-01 00:00:00' WHERE session_id = 'telegram:1'"))
    assert await store.sessions.delete_expired(datetime.now(UTC) - timedelta(days=30)) == (1, 0)
    assert await index.stamp(A) == (0, 0) and (await index.stamp(B))[0] == 1
