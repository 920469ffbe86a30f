"""Hybrid memory search: BM25 terms, vector ranking, RRF, per-session privacy, keyword-only fallback."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path

import numpy as np

from memory.daily import DailyMemory
from memory.embeddings import LocalEmbedder
from memory.index import MemoryIndex
from memory.search import Corpus, MemorySearch, Passage, format_passages, fuse, terms
from tests.memory.test_index import HashEmbedder

A, B = "telegram:1", "telegram:2"


async def add(index: MemoryIndex, session_id: str, kind: str, text: str, source: str) -> None:
    """Write ``text`` to the session's file ``source`` (as the bot does), then index it."""
    folder = index.memory.session_dir(session_id)
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / source).open("a", encoding="utf-8") as f:
        f.write(text + "\n")
    await index.add(session_id, kind, text, source)


def test_terms_fold_drop_stop_words_and_split_chinese() -> None:
    assert list(terms("What is my Cat's name? Cats!")) == ["cat", "name", "cat"]
    assert list(terms("我的猫叫Tom")) == ["猫", "猫叫", "叫", "tom"]


def test_fuse_is_reciprocal_rank_fusion() -> None:
    fused = fuse([3, 1], [1, 2])
    assert [pos for pos, _ in fused] == [1, 3, 2]
    assert fused[0][1] == 1 / 62 + 1 / 61
    assert fuse() == []
    # a tie goes to the earlier-listed ranking (keywords before vectors), not to the older passage
    assert [pos for pos, _ in fuse([7], [2])] == [7, 2]


async def test_keyword_search_when_semantic_is_off(store, tmp_path: Path) -> None:
    search = MemorySearch(MemoryIndex(store, None, DailyMemory(tmp_path, UTC)))
    await add(search.index, A, "summary", "- Alice's budget is 2000 EUR.\n- Bob prefers trains.", "2026-03-01.md")
    await add(search.index, A, "note", "- Alice moved to Lyon.", "MEMORY.md")
    hits = await search.search(A, "alice budget")
    assert [(h.source, h.date, h.kind, h.text) for h in hits] == [
        ("2026-03-01.md", "2026-03-01", "summary", "Alice's budget is 2000 EUR."),
        ("MEMORY.md", "", "note", "Alice moved to Lyon.")]
    assert await search.search(A, "zebra") == []
    assert await search.search(A, "   ") == []
    assert await search.search(B, "alice") == []  # strictly per session


async def test_hybrid_finds_by_meaning_with_the_local_model(store, tmp_path: Path) -> None:
    search = MemorySearch(MemoryIndex(store, LocalEmbedder(), DailyMemory(tmp_path, UTC)))
    await add(search.index, A, "summary", "- My cat is called Tom.\n- The dentist appointment is on Friday.\n"
                                          "- I work as a nurse in Berlin.", "2026-03-01.md")
    await add(search.index, B, "summary", "- My dog is called Rex.", "2026-03-01.md")
    hits = await search.search(A, "what is my pet named?")
    assert hits[0].text == "My cat is called Tom."
    assert all(h.text != "My dog is called Rex." for h in hits)
    keywords_only = await search.search(A, "what is my pet named?", semantic=False)
    assert keywords_only == []  # no shared word: only meaning finds it


async def test_vectors_of_another_model_are_not_compared(store, tmp_path: Path) -> None:
    memory = DailyMemory(tmp_path, UTC)
    await add(MemoryIndex(store, HashEmbedder(), memory), A, "note", "- alpha beta", "MEMORY.md")
    other = HashEmbedder()
    other.name = "hash-other"
    search = MemorySearch(MemoryIndex(store, other, memory))
    corpus = await search.corpus(A)
    assert len(corpus.rows) == 1 and len(corpus.vector_rows) == 0
    assert [h.text for h in await search.search(A, "alpha")] == ["alpha beta"]  # keywords still find it


async def test_corpus_is_cached_until_the_index_changes(store, tmp_path: Path) -> None:
    search = MemorySearch(MemoryIndex(store, HashEmbedder(), DailyMemory(tmp_path, UTC)))
    await search.index.add(A, "note", "- one", "MEMORY.md")
    first = await search.corpus(A)
    assert await search.corpus(A) is first
    await search.index.add(A, "note", "- two", "MEMORY.md")
    second = await search.corpus(A)
    assert second is not first and [r.text for r in second.rows] == ["one", "two"]
    search.forget(A)
    assert await search.corpus(A) is not second


async def test_empty_index_is_filled_from_existing_files_once(store, tmp_path: Path) -> None:
    memory = DailyMemory(tmp_path, UTC)
    await memory.append(A, "trim", "- The vault code is 4711.")
    search = MemorySearch(MemoryIndex(store, HashEmbedder(), memory))
    hits = await search.search(A, "vault code")
    assert [(h.text, h.date) for h in hits] == [("The vault code is 4711.", memory.today())]
    assert await search.index.stamp(B) == (0, 0) and await search.search(B, "vault") == []


def test_vector_ranking_threshold_and_dimension_check() -> None:
    from memory.index import ChunkRow

    rows = [ChunkRow(i + 1, "MEMORY.md", "note", t, "m", 2, np.array(v, dtype="<f4").tobytes())
            for i, (t, v) in enumerate([("x", [1.0, 0.0]), ("y", [0.0, 1.0]), ("z", [0.6, 0.8])])]
    corpus = Corpus.build(rows, "m")
    assert corpus.vector_ranking(np.array([1.0, 0.0], dtype=np.float32)) == [0, 2]  # y scores 0: dropped
    assert corpus.vector_ranking(np.array([1.0, 0.0, 0.0], dtype=np.float32)) == []


def test_format() -> None:
    hits = [Passage("2026-03-01.md", "2026-03-01", "summary", "a", 0.1), Passage("MEMORY.md", "", "note", "b", 0.1)]
    assert format_passages(hits) == "[2026-03-01.md, 2026-03-01] a\n[MEMORY.md] b"


async def test_a_change_of_model_embeds_the_stored_passages_again(store, tmp_path: Path, monkeypatch) -> None:
    from memory import search as search_module

    memory = DailyMemory(tmp_path, UTC)
    await add(MemoryIndex(store, HashEmbedder(), memory), A, "note", "- alpha beta\n- gamma\n- delta", "MEMORY.md")
    await add(MemoryIndex(store, None, memory), A, "note", "- stored without a vector", "MEMORY.md")
    new = HashEmbedder()
    new.name, new.dim = "hash-new", 6
    monkeypatch.setattr(search_module, "REFRESH_BATCH", 3)
    search = MemorySearch(MemoryIndex(store, new, memory))
    assert await search.search(A, "alpha", semantic=False)  # keywords only: nothing embedded
    await search.refreshed()
    assert await search.index.models(A) == {"hash-8": 3, "": 1}
    # the words answer at once; the passages are embedded again in the background, a batch at a time
    assert [h.text for h in await search.search(A, "alpha")] == ["alpha beta"]
    await search.refreshed(A)
    assert await search.index.models(A) == {"hash-new": 4}
    hits = await search.search(A, "delta")
    corpus = await search.corpus(A)
    assert len(corpus.vector_rows) == 4 and corpus.vectors.shape == (4, 6)
    assert hits[0].text == "delta"
    # the stored texts, oldest first, then the query that found vectors of the new model
    assert new.calls == [["alpha beta", "gamma", "delta"], ["stored without a vector"], ["delta"]]


async def test_a_failing_new_model_keeps_the_old_vectors_and_is_not_retried(store, tmp_path: Path) -> None:
    memory = DailyMemory(tmp_path, UTC)
    await add(MemoryIndex(store, HashEmbedder(), memory), A, "note", "- alpha beta", "MEMORY.md")
    new = HashEmbedder()
    new.name, new.fail = "hash-new", True
    search = MemorySearch(MemoryIndex(store, new, memory))
    assert [h.text for h in await search.search(A, "alpha")] == ["alpha beta"]
    await search.refreshed()
    assert [h.text for h in await search.search(A, "alpha")] == ["alpha beta"]
    await search.refreshed()
    assert await search.index.models(A) == {"hash-8": 1}
    assert new.calls == [["alpha beta"]]  # tried once; with no vector of the new model no query is embedded
async def test_a_file_changed_outside_the_bot_is_searched_as_it_is_now(store, tmp_path: Path) -> None:
    """An operator appends to MEMORY.md, edits a daily file and deletes another while the bot runs."""
    embedder = HashEmbedder()
    search = MemorySearch(MemoryIndex(store, embedder, DailyMemory(tmp_path, UTC)))
    await add(search.index, A, "note", "- Alice moved to Lyon.", "MEMORY.md")
    await add(search.index, A, "summary", "- The boiler was fixed.", "2026-03-01.md")
    await add(search.index, A, "summary", "- Bob sold the van.", "2026-03-02.md")
    assert [h.text for h in await search.search(A, "Lyon", semantic=False)] == ["Alice moved to Lyon."]
    embedded = len(embedder.calls)
    folder = search.index.memory.session_dir(A)
    with (folder / "MEMORY.md").open("a", encoding="utf-8") as f:
        f.write("- The spare key is under the blue flowerpot.\n")
    (folder / "2026-03-01.md").write_text("# Daily Memory: 2026-03-01\n- The boiler is broken again.\n")
    (folder / "2026-03-02.md").unlink()
    found = await search.search(A, "spare key", semantic=False)
    assert [h.text for h in found] == ["The spare key is under the blue flowerpot."]
    assert [h.text for h in await search.search(A, "boiler", semantic=False)] == ["The boiler is broken again."]
    assert await search.search(A, "van", semantic=False) == []
    await search.search(A, "key")  # new passages are embedded after a search, in the background
    await search.refreshed()
    texts = [t for call in embedder.calls[embedded:] for t in call if t not in ("spare key", "boiler", "van", "key")]
    # only the new passages are embedded, not the unchanged ones
    assert sorted(texts) == ["The boiler is broken again.", "The spare key is under the blue flowerpot."]
    assert await search.index.sync(A) == 0  # nothing changed since


async def test_a_stop_cancels_the_background_embedding(store, tmp_path: Path) -> None:
    memory = DailyMemory(tmp_path, UTC)
    await add(MemoryIndex(store, None, memory), A, "note", "- stored without a vector", "MEMORY.md")
    embedder = HashEmbedder()
    search = MemorySearch(MemoryIndex(store, embedder, memory))
    async with search.priority.searching():  # a search runs: the background embedding waits for its turn
        assert [h.text for h in await search.search(A, "stored")] == ["stored without a vector"]
        await search.stop()
    await search.refreshed()
    assert await search.index.models(A) == {"": 1} and embedder.calls == []
