"""The bot's daily cap with three ``app.py`` processes on one PostgreSQL (DESIGN §12): a flood of chats
arriving at all three at once overruns the cap by at most about one turn per process.

PostgreSQL only: skipped without ``TEST_DATABASE_URL``.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest
from sqlalchemy import func, select

from store.models import UsageFlightRow, UsageRow
from store.store import Store
from tests.fakes.cluster import Cluster, chat_id, fresh_schema
from tests.fakes.openai_server import FakeOpenAIServer, message_text
from tests.fakes.telegram_api import FakeTelegramAPI

TEST_DATABASE_URL = os.environ.get("TEST_DATABASE_URL", "")
pytestmark = pytest.mark.skipif(not TEST_DATABASE_URL, reason="TEST_DATABASE_URL not set (PostgreSQL only)")

PROCESSES = 3
CHATS = 36
#: every answer spends this many tokens
TURN = 100
CAP = 1500
REFUSAL = "The bot has used its daily limit of 1,500 tokens for everyone"


def answer(body: dict[str, Any]) -> dict[str, Any]:
    users = [m for m in body["messages"] if m["role"] == "user"]
    return {"content": "echo: " + message_text(users[-1]),
            "usage": {"prompt_tokens": TURN - 10, "completion_tokens": 10}}


async def spent(db_url: str) -> tuple[int, int, int]:
    """(tokens, calls, flights left) in the database."""
    store = Store(db_url, create_tables=False)
    await store.open()
    try:
        def read(conn):
            c = UsageRow.__table__.c
            tokens, calls = conn.execute(select(func.sum(c.prompt_tokens + c.completion_tokens), func.count())).one()
            flights = conn.execute(select(func.count()).select_from(UsageFlightRow.__table__)).scalar()
            return int(tokens or 0), int(calls), int(flights)
        return await store.run(read)
    finally:
        await store.close()


def wait_for_replies(api: FakeTelegramAPI, chats: set[int], timeout: float = 60) -> list[str]:
    """Wait until each chat got one reply; return the replies' texts."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        texts = [str(m.get("text")) for m in list(api.sent) if int(m.get("chat_id", 0)) in chats]
        if len(texts) >= len(chats):
            return texts
        time.sleep(0.1)
    raise AssertionError(f"{len(texts)} replies for {len(chats)} chats within {timeout} s")


def test_a_flood_on_three_processes_overruns_the_cap_by_at_most_one_turn_each(tmp_path):
    with FakeTelegramAPI(username="mp_bot") as api, FakeOpenAIServer() as llm, \
            fresh_schema(TEST_DATABASE_URL) as db_url:
        llm.responder = answer
        llm.latency = 0.5  # turns overlap: dozens are in flight across the processes at once
        cluster = Cluster(tmp_path, api, llm, db_url, processes=PROCESSES, usage_cap_daily_tokens=CAP,
                          timezone="UTC")
        try:
            cluster.start()
            cluster.send(0)  # a first turn: from now on the processes know what a turn spends
            assert wait_for_replies(api, {chat_id(0)}) == ["echo: c0 m0"]
            for chat in range(1, CHATS + 1):
                cluster.send(chat)
            texts = wait_for_replies(api, {chat_id(c) for c in range(CHATS + 1)})
        finally:
            cluster.stop()
        tokens, calls, flights = asyncio.run(spent(db_url))
    answered = [t for t in texts if t.startswith("echo: ")]
    refused = [t for t in texts if t.startswith(REFUSAL)]
    assert len(answered) + len(refused) == CHATS + 1
    assert calls == len(answered) and tokens == TURN * len(answered)
    assert refused, "the flood went past the cap"
    # the cap is reached, and overrun by no more than one turn per process
    assert CAP <= tokens <= CAP + PROCESSES * TURN, (tokens, len(answered))
    assert flights == 0  # every turn's in-flight mark was removed
