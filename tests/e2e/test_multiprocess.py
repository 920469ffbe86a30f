"""Several ``app.py`` processes on one PostgreSQL (DESIGN §10, issue 21), end to end through the fakes.

Each test starts real bot processes (tests/fakes/cluster.py) on one PostgreSQL schema, one fake Bot API and
one fake model that answers ``echo: <text>``. Chats send numbered messages ``c<chat> m<i>``; the fake Bot
API delivers webhook updates round robin across the processes (one chat's in order, redelivered to the next
process when one fails), so one chat's messages land on different processes. PostgreSQL only: skipped
without ``TEST_DATABASE_URL``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.fakes.cluster import ADMIN_ID, Cluster, fresh_schema
from tests.fakes.openai_server import FakeOpenAIServer, message_text
from tests.fakes.tally import message_text as numbered
from tests.fakes.tally import replies_by_chat
from tests.fakes.telegram_api import FakeTelegramAPI

TEST_DATABASE_URL = os.environ.get("TEST_DATABASE_URL", "")
pytestmark = pytest.mark.skipif(not TEST_DATABASE_URL, reason="TEST_DATABASE_URL not set (PostgreSQL only)")

#: what store/retention.py logs once per run of the retention job
CLEANUP_RUN = "Cleanup removed"
EXPIRED_SESSION = "telegram:555"


@contextlib.contextmanager
def running(folder: Path, processes: int, mode: str = "webhook", seed=None, **kwargs) -> Iterator[Cluster]:
    """A started cluster on its own fake servers and PostgreSQL schema; ``seed(db_url)`` runs before the start."""
    with FakeTelegramAPI(username="mp_bot") as api, FakeOpenAIServer() as llm, \
            fresh_schema(TEST_DATABASE_URL) as db_url:
        if seed is not None:
            asyncio.run(seed(db_url))
        cluster = Cluster(folder, api, llm, db_url, processes=processes, mode=mode, **kwargs)
        try:
            yield cluster.start()
        finally:
            cluster.stop()


@pytest.fixture
def fresh(cluster: Cluster) -> Iterator[Cluster]:
    """The class's shared cluster, with this test's counters empty and the model quick."""
    cluster.sent.clear()
    cluster.llm.latency = 0.0
    yield cluster
    cluster.llm.latency = 0.0


def user_texts(body: dict) -> list[str]:
    return [message_text(m) for m in body["messages"] if m["role"] == "user"]


def assistant_texts(body: dict) -> list[str]:
    return [message_text(m) for m in body["messages"] if m["role"] == "assistant"]


def send_rounds(cluster: Cluster, chats: int, rounds: int, gap: float = 0.03, first: int = 0) -> None:
    """``rounds`` messages per chat (chats ``first``, ``first + 1``, …), interleaved across chats."""
    for _ in range(rounds):
        for chat in range(first, first + chats):
            cluster.send(chat)
            time.sleep(gap)


def assert_spread(cluster: Cluster) -> None:
    """Precondition: messages of one chat were delivered to more than one process (else nothing contended)."""
    router = cluster.api.webhook_router
    assert router is not None
    by_chat: dict[int, set[str]] = {}
    for attempt in router.attempts:
        if attempt.status == 200 and attempt.chat_id is not None:
            by_chat.setdefault(attempt.chat_id, set()).add(attempt.target)
    assert sum(len(targets) > 1 for targets in by_chat.values()) >= len(by_chat) // 2, by_chat


def assert_context_current(llm: FakeOpenAIServer, cluster: Cluster) -> None:
    """Every turn saw the turn before it, whichever process answered that one (its context was reloaded)."""
    for chat, i in cluster.sent:
        if i == 0:
            continue
        bodies = [b for b in llm.requests if user_texts(b) and user_texts(b)[-1] == numbered(chat, i)]
        assert bodies, f"no model request for {numbered(chat, i)}"
        for body in bodies:
            assert numbered(chat, i - 1) in user_texts(body)[:-1], (numbered(chat, i), user_texts(body))
            assert "echo: " + numbered(chat, i - 1) in assistant_texts(body), (numbered(chat, i),
                                                                                 assistant_texts(body))
            assert not any(t.startswith(f"c{chat} m") and int(t.split("m")[1]) > i for t in user_texts(body))


def check_order(cluster: Cluster, chats: int) -> None:
    """Each chat's messages, spread over the processes, are answered once and in order with the turn before
    in context."""
    cluster.llm.latency = 0.2  # turns overlap: a chat's next message arrives at another process while one runs
    send_rounds(cluster, chats, rounds=4)
    settled = cluster.wait_settled(timeout=30)
    result = cluster.tally()
    assert_spread(cluster)
    assert result.ok and settled, result.describe()
    assert result.answered_once == chats * 4
    assert_context_current(cluster.llm, cluster)


# Starting processes costs seconds each, so the tests of a class share its processes (each uses its own
# chats); a class's processes stop at its end.
@pytest.fixture(scope="class")
def two_processes(tmp_path_factory) -> Iterator[Cluster]:
    with running(tmp_path_factory.mktemp("two"), 2) as cluster:
        yield cluster


@pytest.fixture(scope="class")
def three_processes(tmp_path_factory) -> Iterator[Cluster]:
    """An expired session is seeded before they start (for the cleanup test)."""
    with running(tmp_path_factory.mktemp("three"), 3, seed=seed_expired_session) as cluster:
        yield cluster


# (pytest 9 deprecates class-scoped fixtures defined as methods: the clusters are module-level fixtures of
# class scope, and each class names its own as ``cluster``.)
class TestTwoWebhookProcesses:
    @pytest.fixture
    def cluster(self, two_processes: Cluster) -> Cluster:
        return two_processes

    def test_each_message_is_answered_once_in_order(self, fresh):
        check_order(fresh, chats=7)

    def test_config_set_in_one_process_reaches_the_others(self, fresh):
        cluster, api = fresh, fresh.api
        if not cluster.shared_config:
            pytest.fail("the processes cannot share config.json: this app.py does not read TELEGRAM_WEBHOOK_PORT")
        router = api.webhook_router
        assert router is not None
        router.pinned[ADMIN_ID] = cluster.webhook_urls[0]
        api.push_text(ADMIN_ID, "/config agent_max_steps 9", user_id=ADMIN_ID)
        wait_texts(api, ADMIN_ID, 1)
        assert api.chat_texts(ADMIN_ID)[0].startswith("Set agent_max_steps = 9")
        time.sleep(2.0)  # config.json edits apply within 2 s (DESIGN §1.5)
        router.pinned[ADMIN_ID] = cluster.webhook_urls[1]
        api.push_text(ADMIN_ID, "/config agent_max_steps", user_id=ADMIN_ID)
        wait_texts(api, ADMIN_ID, 2)
        assert api.chat_texts(ADMIN_ID)[1] == "agent_max_steps = 9"
        assert [a.target for a in router.attempts if a.chat_id == ADMIN_ID and a.status == 200] == cluster.webhook_urls


class TestThreeWebhookProcesses:
    @pytest.fixture
    def cluster(self, three_processes: Cluster) -> Cluster:
        return three_processes

    def test_each_message_is_answered_once_in_order(self, fresh):
        check_order(fresh, chats=8)

    def test_cleanup_job_runs_once_across_processes(self, fresh):
        cluster = fresh
        started = cluster.started_at
        # the startup run comes within 10 s of each start; wait for one, then for the others' windows to pass
        while sum(cluster.count_in_logs(CLEANUP_RUN)) == 0 and time.monotonic() - started < 15:
            time.sleep(0.2)
        time.sleep(max(0.0, started + 11 - time.monotonic()))
        runs = cluster.count_in_logs(CLEANUP_RUN)
        assert sum(runs) == 1, f"cleanup runs per process: {runs}"
        assert asyncio.run(session_exists(cluster.db_url, EXPIRED_SESSION)) is False

    # last: it leaves one process dead
    def test_killed_process_turns_are_taken_over_exactly_once(self, fresh):
        cluster, api = fresh, fresh.api
        cluster.llm.latency = 1.0  # turns are in flight when the process dies
        send_rounds(cluster, chats=9, rounds=3, gap=0.05, first=100)
        time.sleep(0.3)
        victim = cluster.webhook_urls[1]
        router = api.webhook_router
        assert router is not None
        answered = {(chat, i) for chat, idx in replies_by_chat(list(api.sent)).items() for i in idx}
        on_victim = [cluster.updates[a.update_id] for a in router.attempts if a.status == 200 and a.target == victim]
        cluster.kill(1)
        unanswered_on_victim = [key for key in on_victim if key not in answered]
        assert unanswered_on_victim, "precondition: the killed process had messages it had not answered yet"
        settled = cluster.wait_settled(timeout=40, quiet=3)
        result = cluster.tally()
        assert result.ok and settled, result.describe()


def test_polling_one_poller_and_takeover_after_kill_9(tmp_path):
    with running(tmp_path, 2, mode="polling") as cluster:
        check_polling_takeover(cluster)


def check_polling_takeover(cluster: Cluster) -> None:
    """Exactly one process polls; after kill -9 of it the other polls within about 10 s and answers all."""
    api = cluster.api
    for chat in range(4):
        cluster.send(chat)
    assert cluster.wait_settled(timeout=20, quiet=1), cluster.tally().describe()
    pollers = [p for p in cluster.pollers_since(0) if p is not None]
    assert len(pollers) == 1, f"getUpdates came from processes {pollers} (pids {cluster.pids()})"
    poller = cluster.index_of(pollers[0])
    assert poller is not None
    killed_at = time.monotonic()
    cluster.kill(poller)
    for chat in range(4):
        cluster.send(chat)
        cluster.send(chat)
    survivor = cluster.bots[1 - poller].pid
    deadline = killed_at + 20
    while survivor not in cluster.pollers_since(killed_at) and time.monotonic() < deadline:
        time.sleep(0.1)
    took_over = next((at for at, owner in list(api.pollers) if at >= killed_at and owner == survivor), None)
    assert took_over is not None, "no other process polled after the poller died"
    assert took_over - killed_at <= 12, f"takeover after {took_over - killed_at:.1f} s"
    settled = cluster.wait_settled(timeout=20, quiet=1)
    result = cluster.tally()
    assert result.ok and settled, result.describe()
    assert [p for p in cluster.pollers_since(took_over) if p is not None] == [survivor]


# --- helpers -----------------------------------------------------------------------------------
def wait_texts(api: FakeTelegramAPI, chat: int, n: int, timeout: float = 15) -> list[str]:
    deadline = time.monotonic() + timeout
    while len(api.chat_texts(chat)) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"chat {chat}: {api.chat_texts(chat)}")
        time.sleep(0.05)
    return api.chat_texts(chat)


async def seed_expired_session(db_url: str) -> None:
    """One session idle for longer than conversation_max_age_days (30), with a message."""
    from sqlalchemy import text

    from core.records import SessionInfo
    from store.store import Store

    store = Store(db_url)
    await store.open()
    try:
        await store.sessions.ensure(SessionInfo(EXPIRED_SESSION, "telegram", "555", "555"))
        await store.sessions.append(EXPIRED_SESSION, [{"role": "user", "content": "old"}])
        old = datetime.now(UTC) - timedelta(days=90)
        await store.run(lambda conn: conn.execute(text("UPDATE sessions SET last_active = :t WHERE session_id = :s"),
                                                  {"t": old, "s": EXPIRED_SESSION}))
    finally:
        await store.close()


async def session_exists(db_url: str, session_id: str) -> bool:
    from store.store import Store

    store = Store(db_url)
    await store.open()
    try:
        return await store.sessions.get(session_id) is not None
    finally:
        await store.close()



# --- reminders (DESIGN §12) --------------------------------------------------------------------
REMINDER_CHATS = 200
#: the reminders fall due at this many instants, one a second (the reminders job looks every 1 s, with up to 0.5 s of
#: jitter per process): 20 at each instant
REMINDER_INSTANTS = 10
REMINDER_FIRED = "fired"  # reminders/firing.py logs "session …: reminder <id> fired" once per claim


def reminded_chats(api) -> int:
    """How many of the reminder chats have had their reminder so far."""
    return sum(1 for i in range(REMINDER_CHATS) if api.chat_texts(reminder_chat(i)))


def test_reminders_fire_once_across_three_processes_a_kill_repeats_at_most_one(tmp_path):
    """200 reminders due within ten seconds (20 at each of 10 instants, 1 s apart), three processes firing them,
    one killed with kill -9 in the middle (once a third have gone out, so two thirds are still to come): each chat
    gets its reminder, and at most the one in flight at the kill comes twice."""
    with running(tmp_path, 3) as cluster:
        api = cluster.api
        first = datetime.now(UTC) + timedelta(seconds=2)
        asyncio.run(seed_reminders(cluster.db_url, first))
        deadline = time.monotonic() + 60
        while reminded_chats(api) < REMINDER_CHATS // 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        fired_before = cluster.count_in_logs(REMINDER_FIRED)
        victim = fired_before.index(max(fired_before))  # the busiest: it has claimed reminders in flight
        assert fired_before[victim] > 0, "precondition: reminders were firing when the process died"
        cluster.kill(victim)
        deadline = time.monotonic() + 60
        while reminded_chats(api) < REMINDER_CHATS and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3)  # a duplicate would come within the sweep interval
        texts = {i: api.chat_texts(reminder_chat(i)) for i in range(REMINDER_CHATS)}
        wrong = {i: t for i, t in texts.items() if not t or set(t) != {f"⏰ Reminder: r{i}"}}
        assert not wrong, f"{len(wrong)} chats did not get their reminder: {dict(list(wrong.items())[:5])}"
        # Telegram took it and the victim died before marking it: the one reminder in flight may come twice (no
        # idempotency key closes that window; each reminder is marked before the next send starts)
        repeats = {i: len(t) for i, t in texts.items() if len(t) > 1}
        assert sum(n - 1 for n in repeats.values()) <= 1, f"sent again after one kill: {repeats}"
        # one claim (one journal row) per reminder; the log may miss the victim's last claim (killed before its line)
        assert asyncio.run(reminder_claims(cluster.db_url)) == (REMINDER_CHATS, REMINDER_CHATS, 0)
        fired = cluster.count_in_logs(REMINDER_FIRED)
        assert sum(n > 0 for n in fired) >= 2, fired  # the claims were spread over the processes


async def reminder_claims(db_url: str) -> tuple[int, int, int]:
    """(reminders sent, their journal rows, journal rows still pending)."""
    from sqlalchemy import text

    from store.store import Store

    store = Store(db_url)
    await store.open()
    try:
        def count(conn):
            one = conn.execute(text("SELECT count(*) FROM reminders WHERE status = 'sent'")).scalar_one()
            rows = conn.execute(text("SELECT count(*), count(*) FILTER (WHERE status = 'pending') FROM inbox "
                                     "WHERE message_id LIKE 'reminder-%'")).one()
            return one, rows[0], rows[1]

        return await store.run(count)
    finally:
        await store.close()


def reminder_chat(i: int) -> int:
    return 5000 + i


async def seed_reminders(db_url: str, first: datetime) -> None:
    """One reminder per chat, ``r<i>``, due at ``first`` + (i % REMINDER_INSTANTS) s."""
    from core.messages import IncomingMessage
    from core.records import SessionInfo
    from store.reminders import Reminders
    from store.store import Store

    store = Store(db_url)
    await store.open()
    try:
        reminders = Reminders(store)
        for i in range(REMINDER_CHATS):
            chat = str(reminder_chat(i))
            sid = f"telegram:{chat}"
            await store.sessions.ensure(SessionInfo(sid, "telegram", chat, chat))
            target = IncomingMessage(channel="telegram", chat_id=chat, user_id=chat, text="").to_json()
            await reminders.add(sid, sid, first + timedelta(seconds=i % REMINDER_INSTANTS), f"r{i}", target=target)
    finally:
        await store.close()
