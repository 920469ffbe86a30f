"""The index of stored turns (memory/history_index.py over store/message_vectors.py), on SQLite and PostgreSQL:
what is embedded, catching up after a restart, the hybrid search, deletion with the session, the cache."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from core.records import SessionInfo
from memory import history_index as hi
from memory.embeddings import BaseEmbedder, normalise, quantise
from memory.history_index import HistoryIndex, SessionVectors, embed_texts
from store import message_vectors as mv
from store.sessions import delete_session_history
from store.store import Store

A, B = "telegram:1", "telegram:2"
#: words that mean the same to the fake model: one direction each
TOPICS = [("job", "work", "nurse", "hospital"), ("pet", "cat", "dog", "tom"), ("trip", "flight", "travel", "lisbon")]


class TopicEmbedder(BaseEmbedder):
    """A model that knows three topics: a text's vector counts the words of each (plus a little of itself), so
    "what is my job?" is near "I work as a nurse" without a word in common. Records what it embeds."""

    name = "topics-8"
    dim = 8

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.queries: list[str] = []
        self.fail = False

    def vector(self, text: str) -> np.ndarray:
        words = text.lower().replace("?", " ").replace(".", " ").replace(",", " ").split()
        v = np.zeros(self.dim, dtype=np.float32)
        for i, topic in enumerate(TOPICS):
            v[i] = sum(w in topic for w in words)
        v[7] = 0.1
        return v

    async def embed(self, texts: list[str]) -> np.ndarray:
        if self.fail:
            raise ConnectionError("embedder down")
        self.texts.extend(texts)
        return normalise(np.array([self.vector(t) for t in texts]))

    async def embed_question(self, text: str) -> np.ndarray:
        if self.fail:
            raise ConnectionError("embedder down")
        self.queries.append(text)
        return normalise(self.vector(text))[0]


def user(t: str) -> dict[str, Any]:
    return {"role": "user", "content": t}


def assistant(t: str) -> dict[str, Any]:
    return {"role": "assistant", "content": t}


async def seed(store: Store) -> None:
    for sid in (A, B):
        await store.sessions.ensure(SessionInfo(sid, "telegram", sid.split(":")[1]))
    await store.sessions.append(A, [user("I work as a nurse at the city hospital"),
                                    assistant("That sounds demanding.")])
    await store.sessions.append(A, [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "web_fetch", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a page about cats and dogs " * 50},
        assistant("The page is about pets.")])
    await store.sessions.append(B, [user("My cat is called Tom"), assistant("ok")])
    await store.sessions.append(A, [user("Next month I fly to Lisbon"), assistant("Have a good flight!")])


async def vector_rows(store: Store, session_id: str) -> list[tuple[int, float, int]]:
    """(seq, scale, vector bytes) of the session's rows."""
    from sqlalchemy import text

    rows = await store.run(lambda c: c.execute(text(
        "SELECT seq, scale, vector FROM message_vectors WHERE session_id = :s ORDER BY seq"), {"s": session_id}).all())
    return [(seq, scale, len(vector)) for seq, scale, vector in rows]


async def test_one_vector_per_exchange_and_none_for_filler_or_tool_output(store) -> None:
    await seed(store)
    model = TopicEmbedder()
    index = HistoryIndex(store, model)
    assert await index.catch_up() == 8  # 6 in A (the tool result is not picked), 2 in B
    assert await index.catch_up() == 0  # nothing twice
    assert model.texts == ["I work as a nurse at the city hospital\nThat sounds demanding.",  # with its answer
                           "The page is about pets.",  # after the tool call: answers no question
                           "My cat is called Tom",  # its answer, "ok", says nothing
                           "Next month I fly to Lisbon\nHave a good flight!"]
    rows = await vector_rows(store, A)
    # the answers' rows (2, 7) and the tool call without text (3) have empty vectors: not picked again
    assert [(seq, length) for seq, _, length in rows] == [(1, 8), (2, 0), (3, 0), (5, 8), (6, 8), (7, 0)]
    assert all(scale > 0 for seq, scale, length in rows if length)
    assert await store.run(mv.count) == 8


async def test_an_answer_stored_after_its_question_was_embedded_gets_its_own_vector(store) -> None:
    await seed(store)
    index = HistoryIndex(store, TopicEmbedder())
    await index.catch_up()
    await store.sessions.append(A, [user("ok thanks!"), user("Where do I work again?")])  # no answer yet
    model = index.embedder = TopicEmbedder()
    assert await index.catch_up() == 2
    assert model.texts == ["Where do I work again?"]  # "ok thanks!" has no content word: not embedded
    await store.sessions.append(A, [assistant("At the city hospital, as a nurse.")])
    assert await index.catch_up() == 1
    assert model.texts[1:] == ["Where do I work again?\nAt the city hospital, as a nurse."]


async def test_a_new_indexer_catches_up_on_what_was_stored_while_it_was_down(store) -> None:
    await seed(store)
    assert await HistoryIndex(store, TopicEmbedder()).catch_up() == 8
    await store.sessions.append(A, [user("My dog is Rex"), assistant("Hi Rex!")])
    later = TopicEmbedder()  # a restart: a new process, nothing queued in memory
    assert await HistoryIndex(store, later).catch_up() == 2
    assert later.texts == ["My dog is Rex\nHi Rex!"]


async def test_meaning_finds_what_words_miss_and_words_still_count(store) -> None:
    await seed(store)
    index = HistoryIndex(store, TopicEmbedder())
    await index.catch_up()
    assert await store.sessions.search_history(A, "what is my job?", 10) == []  # no word in common
    hits = await index.search(A, "what is my job?", 5)
    assert hits[0].seq == 1 and hits[0].passage == "I work as a nurse at the city hospital"
    assert hits[0].after is not None and hits[0].after.text == "That sounds demanding."
    assert hits[0].created_at.tzinfo is not None
    # a word match and a meaning match agree: first
    assert (await index.search(A, "Lisbon travel", 5))[0].seq == 6
    # one session only: B's cat is not in A's results
    assert all(h.passage != "My cat is called Tom" for h in await index.search(A, "my pet", 10))
    assert (await index.search(B, "my pet", 10))[0].passage == "My cat is called Tom"


async def test_the_turn_being_answered_is_never_found(store) -> None:
    await seed(store)
    index = HistoryIndex(store, TopicEmbedder())
    assert await store.sessions.append(A, [user("what is my job?")]) == [8]  # the question being answered
    await index.catch_up()
    hits = await index.search(A, "what is my job?", 10, before_seq=8)
    assert hits and all(h.seq < 8 for h in hits)
    assert all(h.after is None or h.after.seq < 8 for h in hits)
    # without the limit it would be found (a question goes a few places down, questions_later)
    assert 8 in [h.seq for h in await index.search(A, "what is my job?", 10)]


async def test_off_or_failing_model_leaves_the_full_text_search(store) -> None:
    await seed(store)
    off = HistoryIndex(store, None)
    assert await off.catch_up() == 0 and await store.run(mv.count) == 0
    assert await off.search(A, "what is my job?", 5) == []
    words = await store.sessions.search_history(A, "Lisbon", 5)
    assert [h.seq for h in await off.search(A, "Lisbon", 5)] == [h.seq for h in words] == [6]
    down = TopicEmbedder()
    index = HistoryIndex(store, down)
    down.fail = True
    with pytest.raises(ConnectionError):
        await index.catch_up()
    assert await store.run(mv.count) == 0  # nothing half-written
    assert [h.seq for h in await index.search(A, "Lisbon", 5)] == [6]  # the words still answer
    down.fail = False
    assert await index.catch_up() == 8


async def test_vectors_go_with_their_session_and_the_cache_follows(store) -> None:
    await seed(store)
    index = HistoryIndex(store, TopicEmbedder())
    await index.catch_up()
    assert (await index.search(A, "what is my job?", 5))[0].passage.startswith("I work as a nurse")
    rows = await store.run(delete_session_history, A)  # /forget
    assert rows["message_vectors"] == 6
    assert await store.run(mv.count, A) == 0 and await store.run(mv.count, B) == 2
    # the same session again, new words at the old seqs: the cached matrix is not used for them
    await store.sessions.ensure(SessionInfo(A, "telegram", "1"))
    await store.sessions.append(A, [user("I love my cat"), assistant("Cats are great.")])
    await index.catch_up()
    hits = await index.search(A, "what is my job?", 5)
    assert [h.passage for h in hits] and all("nurse" not in h.passage for h in hits)
    # deleting the messages (cleanup) deletes their vectors: the foreign key cascades on both databases
    await store.run(lambda c: c.exec_driver_sql("DELETE FROM messages WHERE session_id = 'telegram:2'"))
    assert await store.run(mv.count, B) == 0


async def test_cleanup_deletes_the_vectors_of_expired_sessions(store) -> None:
    await seed(store)
    await HistoryIndex(store, TopicEmbedder()).catch_up()
    later = datetime.now(UTC) + timedelta(days=400)
    sessions, messages = await store.sessions.delete_expired(later)
    assert sessions == 2 and messages == 9
    assert await store.run(mv.count) == 0


async def test_a_change_of_model_embeds_everything_again(store) -> None:
    await seed(store)
    await HistoryIndex(store, TopicEmbedder()).catch_up()

    class Other(TopicEmbedder):
        name = "topics-other"

    index = HistoryIndex(store, Other())
    assert await index.catch_up() == 8
    assert await store.run(mv.count) == 8
    assert (await index.search(A, "what is my job?", 5))[0].seq == 1


async def test_the_indexer_runs_in_the_background_and_a_reply_wakes_it(store, monkeypatch) -> None:
    import asyncio

    monkeypatch.setattr(hi, "IDLE_SECONDS", 60.0)
    await seed(store)
    index = HistoryIndex(store, TopicEmbedder())
    index.wake()
    for _ in range(500):
        if await store.run(mv.count) == 8:
            break
        await asyncio.sleep(0.01)
    assert await store.run(mv.count) == 8
    await store.sessions.append(A, [user("My dog is Rex")])
    index.wake()  # what after_reply does
    for _ in range(500):
        if await store.run(mv.count) == 9:
            break
        await asyncio.sleep(0.01)
    assert await store.run(mv.count) == 9
    await index.stop()
    assert index._task is None
    off = HistoryIndex(store, None)
    off.wake()  # semantic search off: no indexer
    assert off._task is None


def test_int8_vectors_rank_as_float_ones(monkeypatch) -> None:
    monkeypatch.setattr(hi, "NEIGHBOUR_WEIGHT", 0.0)  # each row alone, as the float ranking below
    rng = np.random.default_rng(7)
    vectors = normalise(rng.normal(size=(500, 384)))
    query = normalise(vectors[42] + 0.3 * rng.normal(size=384))[0]
    q8, scales = quantise(vectors)
    assert q8.dtype == np.int8 and np.abs(q8).max() == 127
    np.testing.assert_allclose(q8 * scales[:, None], vectors, atol=float(scales.max()))
    held = SessionVectors(384)
    held.extend(mv.VectorRows(list(range(1, 501)), list(range(1, 501)), scales.tolist(),
                              [row.tobytes() for row in q8]))
    exact = (np.argsort(-(vectors @ query))[:10] + 1).tolist()
    assert held.ranking(query, None, 10)[:5] == exact[:5]
    assert held.ranking(query, 43, 10)[0] != 43 and max(held.ranking(query, 43, 10)) < 43
    assert held.nbytes >= 500 * 384


def test_an_exchange_is_ranked_with_its_neighbours() -> None:
    """Rows 2 and 6 are equally near the query; row 3, next to 2, is nearer: 2 ranks before 6."""
    vectors = np.array([[0, 1, 0], [0.6, 0.8, 0], [0.7, 0, 0.714], [0, 1, 0], [0, 1, 0], [0.6, 0.8, 0], [0, 1, 0]],
                       dtype=np.float32)
    q8, scales = quantise(vectors)
    held = SessionVectors(3)
    held.extend(mv.VectorRows(list(range(1, 8)), list(range(1, 8)), scales.tolist(), [row.tobytes() for row in q8]))
    assert held.ranking(np.array([1, 0, 0], dtype=np.float32), None, 7)[:3] == [3, 2, 6]


def test_embed_texts_caps_the_message_and_its_answer() -> None:
    long, answer = "x" * 5000, mv.Neighbour(2, 2, "assistant", {"role": "assistant", "content": "y" * 900})
    message = mv.PendingMessage(1, A, 1, "user", {"role": "user", "content": long}, next=answer)
    (first, text), (second, empty) = embed_texts([message])
    capped = hi.cut_tokens(long, hi.EMBED_TOKENS) + "\n" + hi.cut_tokens("y" * 900, hi.CONTEXT_TOKENS)
    assert (first.id, text) == (1, capped) and len(capped) < 1000
    assert (second.id, second.seq, empty) == (2, 2, "")
    done = mv.Neighbour(2, 2, "assistant", {"role": "assistant", "content": "y"}, indexed=True)
    assert embed_texts([mv.PendingMessage(1, A, 1, "user", "hello there friend", next=done)]) == [
        (mv.PendingMessage(1, A, 1, "user", "hello there friend", next=done), "hello there friend")]
    assert embed_texts([mv.PendingMessage(1, A, 1, "assistant", {"role": "assistant", "content": None})])[0][1] == ""
    assert [hi.has_content(t) for t in ("ok, noted. [1a2b3c4d]", "👍 thanks!!", "42", "猫", "Paris")] == [
        False, False, False, True, True]


async def test_the_cache_keeps_sessions_within_its_bytes(store, monkeypatch) -> None:
    await seed(store)
    index = HistoryIndex(store, TopicEmbedder())
    await index.catch_up()
    monkeypatch.setattr(hi, "CACHE_BYTES", 1)
    await index.search(A, "job", 5)
    await index.search(B, "pet", 5)
    assert list(index._cache) == [B]  # the one searched last is kept, whatever its size


async def test_the_indexer_ends_quietly_when_the_store_is_closed_under_it(db_url, caplog) -> None:
    import asyncio
    import logging

    store = Store(db_url)
    await store.open()
    await seed(store)
    index = HistoryIndex(store, TopicEmbedder())
    index.wake()
    await store.close()  # a stop that did not stop the indexer first
    with caplog.at_level(logging.ERROR, logger="memory.history_index"):
        for _ in range(200):
            if index._task is not None and index._task.done():
                break
            await asyncio.sleep(0.01)
    assert index._task is not None and index._task.done() and index._task.exception() is None
    assert not caplog.records


async def test_a_stop_that_meets_a_wake_up_still_stops_the_indexer(store) -> None:
    """Issue 40 §1 (the plugin tests' hang at teardown): the indexer idled in ``asyncio.wait_for(wake.wait(), …)``,
    which on Python 3.11 returns the inner wait's result instead of raising when its task is cancelled just after
    that wait finished. A stop that came while a reply's wake-up was being delivered was lost: the indexer went on
    idling, ``IDLE_SECONDS`` at a time, and ``stop()`` waited for it for ever."""
    import asyncio

    class Watched(HistoryIndex):
        """The indexer, telling the test when it has caught up (it goes idle in the same step) and whether it
        caught up again after the stop."""

        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.caught_up = asyncio.Event()
            self.stopped = False
            self.ran_after_stop = asyncio.Event()

        async def catch_up(self) -> int:
            if self.stopped:
                self.ran_after_stop.set()
            done = await super().catch_up()
            self.caught_up.set()
            return done

    index = Watched(store, TopicEmbedder())
    index.wake()  # a reply: starts the indexer, and its wake-up is set already when it next goes idle
    await index.caught_up.wait()  # idle now: that wake-up is being delivered while the stop comes
    index.stopped = True
    task = index._task
    assert task is not None
    stop = asyncio.ensure_future(index.stop())
    ran_again = asyncio.ensure_future(index.ran_after_stop.wait())
    await asyncio.wait({stop, ran_again}, return_when=asyncio.FIRST_COMPLETED)
    ran_again.cancel()
    swallowed = index.ran_after_stop.is_set()
    if swallowed:  # cancel it again, mid catch-up this time, so that the test ends
        task.cancel()
    await stop
    assert not swallowed, "the stop was swallowed: the indexer ran on"
    assert task.cancelled()


def test_a_long_message_and_answer_cost_no_more_than_the_caps() -> None:
    """By the model's own tokenizer: whatever their length (English, Chinese), the text embedded for an exchange
    stays within the caps (plus the prefix and a few tokens of the estimate's error)."""
    from memory.embeddings import load_local_model

    engine = load_local_model().engine
    english = " ".join(["yesterday my sister and I finally visited the old lighthouse near Porto"] * 60)
    chinese = "我们昨天终于和妹妹一起去了波尔图附近的老灯塔，风景非常漂亮。" * 60
    for body, reply in ((english, english), (chinese, chinese), (english, chinese)):
        answer = mv.Neighbour(2, 2, "assistant", {"role": "assistant", "content": reply})
        (_, text), _ = embed_texts([mv.PendingMessage(1, A, 1, "user", body, next=answer)])
        assert engine.token_count(body, True) > 3 * (hi.EMBED_TOKENS + hi.CONTEXT_TOKENS)
        assert engine.token_count(text, True) <= (hi.EMBED_TOKENS + hi.CONTEXT_TOKENS) * 1.15 + 4


async def test_a_question_asked_again_is_embedded_once(store) -> None:
    # the model often calls history_search and memory_search with the same words in one turn: both tools share
    # the embedder (the memory_index plugin), which keeps the question's vector
    await seed(store)
    model = TopicEmbedder()
    index = HistoryIndex(store, model)
    await index.catch_up()
    first = await index.search(A, "what is my job?", 5)
    assert await index.search(A, "what is my job?", 5) == first
    assert model.queries == ["what is my job?"]
    await index.search(A, "my pet", 5)
    assert model.queries == ["what is my job?", "my pet"]
    # a failure is not kept: the words answer, and the next search embeds the question again
    model.fail = True
    assert (await index.search(A, "Lisbon travel", 5))[0].seq == 6
    model.fail = False
    assert (await index.search(A, "Lisbon travel", 5))[0].seq == 6
    assert model.queries == ["what is my job?", "my pet", "Lisbon travel"]


async def test_only_the_hits_that_show_their_neighbours_come_with_them(store) -> None:
    await seed(store)
    index = HistoryIndex(store, TopicEmbedder())
    await index.catch_up()
    every = await index.search(A, "work pets Lisbon", 5)
    first = await index.search(A, "work pets Lisbon", 5, near=1)
    assert [h.seq for h in first] == [h.seq for h in every] and len(first) >= 2
    assert first[0] == every[0] and (first[0].before or first[0].after) is not None
    assert all(h.before is None and h.after is None for h in first[1:])
    assert any(h.before or h.after for h in every[1:])


def test_a_hit_that_asks_goes_down_a_few_places_not_out() -> None:
    when = datetime(2026, 3, 1, tzinfo=UTC)
    hits = [hi.HistoryHit(seq, "user", when, text) for seq, text in enumerate(
        ["What inspired you?", "I lost my job. How are you?", "I joined a church", "a", "b", "c", "d", "e", "f"], 1)]
    order = [h.seq for h in hi.questions_later(hits)]
    assert hi.QUESTION_PLACES == 6
    # each question goes 6 places down (ahead of the hit that held that place), the others keep their order
    assert order == [3, 4, 5, 6, 1, 7, 2, 8, 9]
    assert hi.questions_later([]) == []


async def test_both_search_tools_of_one_turn_embed_the_question_once(store, tmp_path) -> None:
    from memory.daily import DailyMemory
    from memory.index import MemoryIndex
    from memory.notes import append_note
    from memory.search import MemorySearch

    # one embedder for both, as the memory_index plugin builds them
    await seed(store)
    model = TopicEmbedder()
    history = HistoryIndex(store, model)
    await history.catch_up()
    files = DailyMemory(tmp_path, UTC)
    await append_note(files, A, "Works night shifts at the hospital.")
    memory = MemoryIndex(store, model, files)
    assert await memory.sync(A) == 1  # embedded
    passages = await MemorySearch(memory).search(A, "what is my job?")
    hits = await history.search(A, "what is my job?", 5)
    assert passages[0].text == "Works night shifts at the hospital." and hits[0].seq == 1
    assert model.queries == ["what is my job?"]
