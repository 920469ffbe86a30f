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
from store.conversations import ConversationStore, SessionInfo
from store.history_search import passage, search_terms

A = "telegram:111"
B = "telegram:222"
WHEN = datetime(2026, 3, 1, 6, 5, tzinfo=UTC)  # 14:05 in Shanghai


def user(t: str) -> dict[str, Any]:
    return {"role": "user", "content": t}


def assistant(t: str) -> dict[str, Any]:
    return {"role": "assistant", "content": t}


async def seed(store: ConversationStore) -> None:
    """Two sessions; A's early turns trimmed out of the context."""
    for sid in (A, B):
        await store.ensure_session(SessionInfo(sid, "telegram", sid.split(":")[1]))
    with time_machine.travel(WHEN, tick=False):
        await store.append(A, [user("My cat is called Tom and I live in Lisbon"), assistant("Nice, Tom!")])
        await store.append(A, [user("我的猫叫汤姆，住在里斯本"), assistant("好的，记住了")])
        await store.append(A, [
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "web_fetch",
                                                                            "arguments": '{"url": "zebra.example"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "zebra page: giraffe"},
            assistant("The page is about animals.")])
    with time_machine.travel(WHEN + timedelta(days=1), tick=False):
        await store.append(A, [user("Flight LX1234 to Lisbon on Friday"), assistant("Booked.")])
    await store.set_context_start(A, 9)  # seq 9: "Booked."  # the earlier turns left the context long ago
    await store.append(B, [user("Bob's cat is Felix, he lives in Lisbon too"), assistant("ok")])


@pytest.fixture
async def seeded(store: ConversationStore) -> ConversationStore:
    await seed(store)
    return store


def ctx(session_id: str, store: ConversationStore) -> ToolContext:
    return ToolContext(session_id=session_id, config=Config(timezone="Asia/Shanghai"), store=store)


def test_terms_and_text() -> None:
    assert search_terms("Where does Alice live?") == ["where", "does", "alice", "live"]
    assert search_terms("猫叫什么") == ["猫叫", "叫什", "什么"]
    assert search_terms("猫") == ["猫"]
    assert search_terms("LX1234 航班") == ["lx1234", "航班"]
    assert search_terms("a b") == ["a", "b"] and search_terms("I am Al") == ["am", "al"]
    assert search_terms("  ?! ") == []
    body = "x" * 300 + " Tom " + "y" * 300
    assert passage(body, ["tom"]) == "…" + "x" * 119 + " Tom " + "y" * 119 + "…"


class TestHistorySearch:
    """The store's search and the tool, on every backend."""

    async def test_finds_trimmed_turns_with_date_role_and_passage(self, seeded: ConversationStore) -> None:
        hits = await seeded.search_history(A, "Tom", 10)
        assert [(h.seq, h.role, h.passage) for h in hits] == [
            (2, "assistant", "Nice, Tom!"), (1, "user", "My cat is called Tom and I live in Lisbon")]
        assert hits[0].created_at == WHEN
        out = await history_search.call(ctx(A, seeded), {"query": "tom"})
        assert out == ("2026-03-01 14:05 assistant: Nice, Tom!\n"
                       "2026-03-01 14:05 user: My cat is called Tom and I live in Lisbon")

    async def test_most_terms_first_then_newest(self, seeded: ConversationStore) -> None:
        hits = await seeded.search_history(A, "Lisbon flight", 10)
        assert [h.seq for h in hits] == [8, 1]
        assert [h.seq for h in await seeded.search_history(A, "Lisbon", 1)] == [8]

    async def test_chinese_short_and_long_queries(self, seeded: ConversationStore) -> None:
        for query in ("汤姆", "猫", "我的猫叫什么", "里斯本"):
            hits = await seeded.search_history(A, query, 10)
            assert [h.passage for h in hits] == ["我的猫叫汤姆，住在里斯本"], query
        out = await history_search.call(ctx(A, seeded), {"query": "猫 名字"})
        assert out == "2026-03-01 14:05 user: 我的猫叫汤姆，住在里斯本"

    async def test_tool_results_and_tool_calls_are_not_indexed(self, seeded: ConversationStore) -> None:
        assert await seeded.search_history(A, "zebra", 10) == []
        assert await seeded.search_history(A, "giraffe web_fetch", 10) == []
        assert [h.seq for h in await seeded.search_history(A, "animals", 10)] == [7]

    async def test_strictly_per_session(self, seeded: ConversationStore) -> None:
        assert [h.passage for h in await seeded.search_history(B, "cat Lisbon Tom", 10)] == [
            "Bob's cat is Felix, he lives in Lisbon too"]
        assert await seeded.search_history(B, "汤姆", 10) == []
        assert await seeded.search_history(A, "Felix", 10) == []
        assert await history_search.call(ctx(B, seeded), {"query": "LX1234"}) == (
            "No messages in this conversation's history match 'LX1234'.")
        assert await seeded.search_history("telegram:999", "Lisbon", 10) == []

    async def test_special_characters_do_not_break_the_query(self, seeded: ConversationStore) -> None:
        await seeded.append(A, [user('50% off "quoted" a_b \\ path')])
        assert [h.seq for h in await seeded.search_history(A, '50% "quoted"', 10)] == [10]
        assert await seeded.search_history(A, "%", 10) == []
        assert [h.seq for h in await seeded.search_history(A, 'path" OR "x', 10)] == [10]  # quotes stay quotes

    async def test_text_parts_are_indexed_and_blank_text_is_not(self, seeded: ConversationStore) -> None:
        await seeded.append(A, [{"role": "user", "content": [{"type": "text", "text": " Parts one "},
                                                             {"type": "image_url", "image_url": {"url": "x"}},
                                                             {"type": "text", "text": "part two\n"}]},
                                {"role": "assistant", "content": "  \n "}])
        hits = await seeded.search_history(A, "parts", 10)
        assert [(h.seq, h.passage) for h in hits] == [(10, "Parts one  part two")]
        assert await seeded.search_history(A, "image_url", 10) == []

        def indexed(conn: Any) -> list[str]:
            return list(conn.execute(text("SELECT text FROM message_search ORDER BY 1")).scalars())

        assert "Parts one \npart two" in await seeded.run(indexed)  # the parts joined, the whole trimmed
        assert "" not in await seeded.run(indexed)

    async def test_empty_query(self, seeded: ConversationStore) -> None:
        assert await history_search.call(ctx(A, seeded), {"query": "  "}) == (
            "Give a non-empty query to search the conversation history.")
        with pytest.raises(RuntimeError, match="needs the conversation store"):
            await history_search.call(ToolContext(session_id=A, config=Config()), {"query": "Tom"})
        assert await seeded.search_history(A, "?!", 10) == []

    async def test_cleanup_deletes_the_index_with_the_messages(self, seeded: ConversationStore) -> None:
        def index_rows(conn: Any) -> int:
            return conn.execute(text("SELECT count(*) FROM message_search")).scalar_one()

        assert await seeded.run(index_rows) == 9
        sessions, messages = await seeded.delete_expired_sessions(datetime.now(UTC) + timedelta(days=1))
        assert (sessions, messages) == (2, 11)
        assert await seeded.run(index_rows) == 0
        assert await seeded.search_history(A, "Tom", 10) == []


async def test_migration_indexes_existing_histories(db_url: str) -> None:
    """A database at revision 0001 with messages: upgrading to head indexes them."""
    from alembic import command

    from store.migrations import alembic_config

    store = ConversationStore(db_url)
    await store.open()
    try:
        await seed(store)
        await store.run(lambda c: command.downgrade(alembic_config(c), "0001"))
        assert await store.run(lambda c: c.execute(text("SELECT count(*) FROM messages")).scalar_one()) == 11
        await store.migrate()
        assert [h.seq for h in await store.search_history(A, "汤姆", 10)] == [3]
        assert [h.seq for h in await store.search_history(A, "animals", 10)] == [7]
        assert await store.search_history(A, "zebra", 10) == []
        if store.dialect == "postgresql":  # pg_trgm ships with Debian's postgresql package
            assert await store.run(lambda c: c.execute(text(
                "SELECT count(*) FROM pg_indexes WHERE indexname = 'ix_message_search_trgm'")).scalar_one()) == 1
    finally:
        await store.close()
