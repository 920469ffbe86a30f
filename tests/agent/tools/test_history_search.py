"""Tests for agent/tools/history_search.py and the store's search (memory/search.py), on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from sqlalchemy import text

from agent.tools.base import ToolContext
from agent.tools.history_search import history_search
from config.settings import Config
from core.records import SessionInfo
from store.history_search import PASSAGE_CHARS, Neighbour, passage
from store.search_terms import query_terms
from store.store import Store

A = "telegram:111"
B = "telegram:222"
WHEN = datetime(2026, 3, 1, 6, 5, tzinfo=UTC)  # 14:05 in Shanghai


def user(t: str) -> dict[str, Any]:
    return {"role": "user", "content": t}


def assistant(t: str) -> dict[str, Any]:
    return {"role": "assistant", "content": t}


async def seed(store: Store) -> None:
    """Two sessions; A's early turns trimmed out of the context."""
    for sid in (A, B):
        await store.sessions.ensure(SessionInfo(sid, "telegram", sid.split(":")[1]))
    with time_machine.travel(WHEN, tick=False):
        await store.sessions.append(A, [user("My cat is called Tom and I live in Lisbon"), assistant("Nice, Tom!")])
        await store.sessions.append(A, [user("我的猫叫汤姆，住在里斯本"), assistant("好的，记住了")])
        await store.sessions.append(A, [
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "web_fetch",
                                                                            "arguments": '{"url": "zebra.example"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "zebra page: giraffe"},
            assistant("The page is about animals.")])
    with time_machine.travel(WHEN + timedelta(days=1), tick=False):
        await store.sessions.append(A, [user("Flight LX1234 to Lisbon on Friday"), assistant("Booked.")])
    await store.sessions.set_context_start(A, 9)  # seq 9: "Booked."  # the earlier turns left the context long ago
    await store.sessions.append(B, [user("Bob's cat is Felix, he lives in Lisbon too"), assistant("ok")])


@pytest.fixture
async def seeded(store: Store) -> Store:
    await seed(store)
    return store


def ctx(session_id: str, store: Store) -> ToolContext:
    return ToolContext(session_id=session_id, config=Config(timezone="Asia/Shanghai"), store=store)


def test_query_terms_and_passage() -> None:
    assert query_terms("Where does Alice live?") == ["alice", "live"]
    assert query_terms("猫叫什么") == ["猫 叫", "叫 什", "什 么"]
    assert query_terms("猫") == ["猫"] and query_terms("我的") == []
    assert query_terms("LX1234 航班") == ["lx1234", "航 班"]
    assert query_terms("a b") == ["a", "b"] and query_terms("I am Al") == ["am", "al"]
    assert query_terms("  ?! ") == []
    short = "Tom lives in Lisbon."
    assert passage(short, ["lisbon"]) == short
    # the part that holds most of the query's terms, not the first match
    body = "Tom said hello. " + "filler words here " * 40 + "Later: Tom moved to Lisbon with Anna in May. " + "z " * 200
    shown = passage(body, ["tom", "lisbon", "anna"])
    assert "Tom moved to Lisbon with Anna in May." in shown and "Tom said hello" not in shown
    assert shown.startswith("…") and shown.endswith("…") and len(shown) <= PASSAGE_CHARS + 2


class TestHistorySearch:
    """The store's search and the tool, on every backend."""

    async def test_finds_trimmed_turns_with_date_role_passage_and_neighbours(self, seeded: Store) -> None:
        hits = await seeded.sessions.search_history(A, "Lisbon cat", 10)
        assert [(h.seq, h.role, h.passage) for h in hits] == [
            (1, "user", "My cat is called Tom and I live in Lisbon"), (8, "user", "Flight LX1234 to Lisbon on Friday")]
        assert hits[0].created_at == WHEN
        assert (hits[0].before, hits[0].after) == (None, Neighbour(2, "assistant", "Nice, Tom!"))
        # tool calls and results lie between: the neighbour is the nearest text
        assert hits[1].before == Neighbour(7, "assistant", "The page is about animals.")
        out = await history_search.call(ctx(A, seeded), {"query": "lisbon cat"})
        assert out == ("2026-03-01 14:05 user: My cat is called Tom and I live in Lisbon\n"
                       "    after, assistant: Nice, Tom!\n"
                       "2026-03-02 14:05 user: Flight LX1234 to Lisbon on Friday")  # neighbours: the best hit's only

    async def test_whole_words_only(self, seeded: Store) -> None:
        await seeded.sessions.append(A, [user("the others went home"), user("her keys are lost")])
        assert [h.seq for h in await seeded.sessions.search_history(A, "her", 10)] == [11]
        assert await seeded.sessions.search_history(A, "isbo", 10) == []

    async def test_the_turn_being_answered_is_left_out(self, seeded: Store) -> None:
        (seq,) = await seeded.sessions.append(A, [user("which flight to Lisbon did I book?")])
        assert seq in [h.seq for h in await seeded.sessions.search_history(A, "flight Lisbon", 10)]
        hits = await seeded.sessions.search_history(A, "flight Lisbon", 10, before_seq=seq)
        assert seq not in [h.seq for h in hits] and hits[0].seq == 8
        tool_ctx = ToolContext(session_id=A, config=Config(timezone="Asia/Shanghai"), store=seeded,
                               turn_start_seq=seq)
        out = await history_search.call(tool_ctx, {"query": "which flight to Lisbon did I book?"})
        # the best hit (the flight, or "Booked." just after it, which "book" finds too) shows it
        assert "user: Flight LX1234" in out.split("\n2026")[0] and "which flight" not in out

    async def test_a_word_finds_its_other_forms(self, seeded: Store) -> None:
        await seeded.sessions.append(A, [user("I painted the fence blue last weekend"),
                                         user("Our families met at the harbour"), user("a painter's life")])
        found = {h.passage for h in await seeded.sessions.search_history(A, "paintings", 10)}
        assert found == {"I painted the fence blue last weekend", "a painter's life"}
        assert [h.passage for h in await seeded.sessions.search_history(A, "family", 10)] == [
            "Our families met at the harbour"]
        # a short word is matched whole: "her" is not in "harbour" nor in "others"
        assert all("her" in h.passage.split() for h in await seeded.sessions.search_history(A, "her", 10))

    async def test_relevance_over_the_whole_history_not_the_newest(self, seeded: Store) -> None:
        await seeded.sessions.append(A, [user("I keep my spare umbrella in the blue locker at work")])
        await seeded.sessions.append(A, [user(f"the weather is nice today, note {i}") for i in range(600)])
        hits = await seeded.sessions.search_history(A, "where is the umbrella locker", 3)
        assert hits[0].passage == "I keep my spare umbrella in the blue locker at work"

    async def test_postgres_ranks_alike_through_the_index_or_the_sessions_rows(self, seeded: Store) -> None:
        """A large session goes through the GIN index, a small one row by row: the same ranking."""
        if seeded.dialect != "postgresql":
            pytest.skip("PostgreSQL's two plans")
        from store.history_search import _postgres_ranking
        from store.models import UTCDateTime

        def ranked(conn: Any, small: bool) -> list[int]:
            stmt = text(_postgres_ranking(query_terms("Lisbon cat 猫"), small)).columns(created_at=UTCDateTime())
            return [row.seq for row in conn.execute(stmt, {"sid": A, "before": 2**62, "cap": 10, "n": 9.0})]

        assert await seeded.run(ranked, True) == await seeded.run(ranked, False) == [1, 3, 8]
        with pytest.raises(ValueError, match="unexpected characters"):
            _postgres_ranking(["x' OR 1=1 --"], True)

    async def test_chinese_short_and_long_queries(self, seeded: Store) -> None:
        for query in ("汤姆", "猫", "我的猫叫什么", "里斯本"):
            hits = await seeded.sessions.search_history(A, query, 10)
            assert [h.passage for h in hits] == ["我的猫叫汤姆，住在里斯本"], query
        await seeded.sessions.append(A, [user("我住在杭州西湖区。"), user("西安很好玩")])
        hits = await seeded.sessions.search_history(A, "我住在哪里？", 10)
        assert [h.passage for h in hits][0] == "我住在杭州西湖区。"
        assert [h.passage for h in await seeded.sessions.search_history(A, "西湖", 10)] == ["我住在杭州西湖区。"]
        out = await history_search.call(ctx(A, seeded), {"query": "猫 名字"})
        assert out == ("2026-03-01 14:05 user: 我的猫叫汤姆，住在里斯本\n    before, assistant: Nice, Tom!\n"
                       "    after, assistant: 好的，记住了")

    async def test_tool_results_and_tool_calls_are_not_indexed(self, seeded: Store) -> None:
        assert await seeded.sessions.search_history(A, "zebra", 10) == []
        assert await seeded.sessions.search_history(A, "giraffe web_fetch", 10) == []
        assert [h.seq for h in await seeded.sessions.search_history(A, "animals", 10)] == [7]

    async def test_strictly_per_session(self, seeded: Store) -> None:
        assert [h.passage for h in await seeded.sessions.search_history(B, "cat Lisbon Tom", 10)] == [
            "Bob's cat is Felix, he lives in Lisbon too"]
        assert await seeded.sessions.search_history(B, "汤姆", 10) == []
        assert await seeded.sessions.search_history(A, "Felix", 10) == []
        assert await history_search.call(ctx(B, seeded), {"query": "LX1234"}) == (
            "No messages in this conversation's history match 'LX1234'.")
        assert await seeded.sessions.search_history("telegram:999", "Lisbon", 10) == []

    async def test_special_characters_do_not_break_the_query(self, seeded: Store) -> None:
        await seeded.sessions.append(A, [user('50% off "quoted" a_b \\ path')])
        assert [h.seq for h in await seeded.sessions.search_history(A, '50% "quoted"', 10)] == [10]
        assert await seeded.sessions.search_history(A, "%", 10) == []
        assert [h.seq for h in await seeded.sessions.search_history(A, 'path" OR "x', 10)] == [10]  # quotes stay quotes

    async def test_text_parts_are_indexed_and_blank_text_is_not(self, seeded: Store) -> None:
        await seeded.sessions.append(A, [{"role": "user", "content": [{"type": "text", "text": " Parts one "},
                                                             {"type": "image_url", "image_url": {"url": "x"}},
                                                             {"type": "text", "text": "part two\n"}]},
                                {"role": "assistant", "content": "  \n "}])
        hits = await seeded.sessions.search_history(A, "parts", 10)
        assert [(h.seq, h.passage) for h in hits] == [(10, "Parts one part two")]
        assert await seeded.sessions.search_history(A, "image_url", 10) == []

        def indexed(conn: Any) -> list[str]:
            return list(conn.execute(text("SELECT text FROM message_search ORDER BY 1")).scalars())

        assert "Parts one \npart two" in await seeded.run(indexed)  # the parts joined, the whole trimmed
        assert "" not in await seeded.run(indexed)

    async def test_empty_query(self, seeded: Store) -> None:
        assert await history_search.call(ctx(A, seeded), {"query": "  "}) == (
            "Give a non-empty query to search the conversation history.")
        with pytest.raises(RuntimeError, match="needs the conversation store"):
            await history_search.call(ToolContext(session_id=A, config=Config()), {"query": "Tom"})
        assert await seeded.sessions.search_history(A, "?!", 10) == []

    async def test_cleanup_deletes_the_index_with_the_messages(self, seeded: Store) -> None:
        def index_rows(conn: Any) -> int:
            return conn.execute(text("SELECT count(*) FROM message_search")).scalar_one()

        assert await seeded.run(index_rows) == 9
        sessions, messages = await seeded.sessions.delete_expired(datetime.now(UTC) + timedelta(days=1))
        assert (sessions, messages) == (2, 11)
        assert await seeded.run(index_rows) == 0
        assert await seeded.sessions.search_history(A, "Tom", 10) == []


async def test_migration_indexes_existing_histories(db_url: str) -> None:
    """A database at revision 0001 with messages: upgrading to head indexes them."""
    from alembic import command

    from store.migrations import alembic_config

    store = Store(db_url)
    await store.open()
    try:
        await seed(store)
        await store.run(lambda c: command.downgrade(alembic_config(c), "0001"))
        assert await store.run(lambda c: c.execute(text("SELECT count(*) FROM messages")).scalar_one()) == 11
        await store.migrate()
        assert [h.seq for h in await store.sessions.search_history(A, "汤姆", 10)] == [3]
        assert [h.seq for h in await store.sessions.search_history(A, "animals", 10)] == [7]
        assert await store.sessions.search_history(A, "zebra", 10) == []
        assert [h.seq for h in await store.sessions.search_history(A, "里斯本", 10)] == [3]
        if store.dialect == "postgresql":
            assert await store.run(lambda c: c.execute(text(
                "SELECT count(*) FROM pg_indexes WHERE indexname = 'ix_message_search_terms' "
                "AND schemaname = current_schema()")).scalar_one()) == 1  # other tests' schemas have theirs
    finally:
        await store.close()


async def test_words_too_common_to_rank_by_are_left_out(store: Store) -> None:
    """A word that more than 1,000 messages (and 5% of all) hold is not ranked by (SQLite always, PostgreSQL
    in a large session); the rarer words of the query find the message, and a query of common words only
    still searches them."""
    from store.history_search import COMMON_MESSAGES, _postgres_rare_enough, _rare_enough

    rare_enough = _rare_enough if store.dialect == "sqlite" else _postgres_rare_enough
    await store.sessions.ensure(SessionInfo(A, "telegram", "111"))
    await store.sessions.append(A, [user(f"the weather is nice, note {i}") for i in range(COMMON_MESSAGES + 1)])
    (seq,) = await store.sessions.append(A, [user("the weather is why I keep my umbrella in the blue locker")])
    assert await store.run(rare_enough, ["weather", "umbrella", "blue"]) == ["umbrella", "blue"]
    assert await store.run(rare_enough, ["weather", "nice"]) == ["weather", "nice"]
    if store.dialect == "postgresql":  # after ANALYZE, the shares come from the planner's statistics
        await store.run(lambda conn: conn.execute(text("ANALYZE message_search")))
        assert await store.run(lambda conn: conn.execute(text(
            "SELECT count(*) FROM pg_stats WHERE schemaname = current_schema() AND tablename = 'message_search' "
            "AND attname = 'terms' AND most_common_elems IS NOT NULL")).scalar_one()) == 1
        assert await store.run(rare_enough, ["weather", "umbrella", "blue"]) == ["umbrella", "blue"]
        assert await store.run(rare_enough, ["weather", "nice"]) == ["weather", "nice"]
    assert [h.seq for h in await store.sessions.search_history(A, "weather umbrella", 3)][0] == seq
    assert len(await store.sessions.search_history(A, "weather", 3)) == 3

async def test_a_neighbour_of_filler_alone_gives_way_to_the_turn_beyond_it(store: Store) -> None:
    """An acknowledgement says nothing beside a hit: the nearest turn that says something is shown instead, cut
    around the query's words."""
    await store.sessions.ensure(SessionInfo(A, "telegram", "111"))
    with time_machine.travel(WHEN, tick=False):
        await store.sessions.append(A, [user("Where did you go last summer? " + "It was a long year. " * 12
                                    + "I ask because of the trip to Lisbon"), assistant("ok, noted. [3fab12c0]"),
                               user("Yes, we went to Lisbon in June"), assistant("ok, thanks!")])
    hits = await store.sessions.search_history(A, "June Lisbon", 10)
    assert hits[0].seq == 3 and hits[0].after is None
    assert hits[0].before is not None and hits[0].before.seq == 1
    assert hits[0].before.text.startswith("…") and hits[0].before.text.endswith("trip to Lisbon")

async def test_output_holds_what_its_budget_holds_and_shows_a_turn_once(store: Store) -> None:
    from agent.tools.history_search import OUTPUT_CHARS, format_hits

    await store.sessions.ensure(SessionInfo(A, "telegram", "111"))
    with time_machine.travel(WHEN, tick=False):
        await store.sessions.append(A, [user(f"note {i}: the blue kayak is in shed {i}") for i in range(60)])
    hits = await store.sessions.search_history(A, "blue kayak shed", 60)
    out = format_hits(hits, UTC)
    assert len(out) <= OUTPUT_CHARS < len(format_hits(hits, UTC, budget=10**6))
    # each turn once: a hit already shown as a better hit's neighbour is not repeated
    said = [line.split(": ", 1)[1] for line in out.splitlines()]
    assert len(said) == len(set(said))
    assert format_hits(hits[:1], UTC, budget=10) == format_hits(hits[:1], UTC)  # the best hit, whatever the budget
