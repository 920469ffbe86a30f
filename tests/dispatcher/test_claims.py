"""Tests for dispatcher/claims.py: two bot "processes" (each its own store, dispatcher and lock connection)
on one PostgreSQL database, in one event loop. The multi-process tests with real processes are in
tests/e2e/test_multiprocess.py."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from agent.loop import Agent
from agent.sessions import LoggingDropSink, SessionManager
from agent.tools.base import ToolRegistry
from config.settings import Config, ConfigHolder
from core.records import SessionInfo
from dispatcher.claims import session_lock
from dispatcher.dispatcher import Dispatcher
from store.locks import AdvisoryLocks
from store.store import Store
from tests.fakes.channel import RecordingChannel
from tests.fakes.fake_llm import FakeLLM

_ids = itertools.count(1)


class Process:
    """One bot process's parts over a shared database."""

    def __init__(self, tmp_path, db_url: str, sent: list, llm: FakeLLM | None = None) -> None:
        self.config = ConfigHolder(Config(data_dir=str(tmp_path)))
        self.store = Store(db_url)
        self.llm = llm or FakeLLM()
        self.locks = AdvisoryLocks(db_url)
        self.channel = RecordingChannel()
        self.channel.sent = sent  # one chat, whichever process answers: one transcript
        self.channel.answered_anywhere = True  # like Telegram's: any process can reply

    async def __aenter__(self) -> Process:
        await self.store.open()
        sink = LoggingDropSink()
        self.sessions = SessionManager(self.store, self.config, sink)
        agent = Agent(llm=self.llm, tools=ToolRegistry(), store=self.store, config=self.config, sink=sink)
        self.dispatcher = Dispatcher(config=self.config, store=self.store, agent=agent, sessions=self.sessions,
                                     locks=self.locks)
        self.dispatcher.add_channel(self.channel)
        self.dispatcher.hold_intake()
        await self.dispatcher.resume_pending()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.dispatcher.drain(5)
        await self.locks.close()
        await self.store.close()

    async def say(self, text: str, chat_id: str = "100") -> None:
        await self.dispatcher.handle(self.channel.message(text, chat_id=chat_id, user_id=chat_id,
                                                          message_id=str(next(_ids))))


@pytest.fixture
def pg_url(db_url: str) -> str:
    if not db_url.startswith("postgresql"):
        pytest.skip("several processes need PostgreSQL")
    return db_url


SESSION = SessionInfo(session_id="telegram:100", channel="telegram", chat_id="100", user_id="100")


async def journal_elsewhere(proc: Process, message_id: str, payload: dict,
                            user_message: dict | None = None) -> int:
    """Journal a message of chat 100 as another process would have (and then died, or still holds it)."""
    inbox_id, _ = await proc.store.journal.record_incoming("telegram", message_id, SESSION.session_id, payload,
                                                   user_message, SESSION)
    return inbox_id


async def settle(*procs: Process, within: float = 30.0) -> None:
    """Wait until no process has work and nothing is left unanswered."""
    async with asyncio.timeout(within):
        while True:
            for p in procs:
                await p.dispatcher.wait_idle()
            if not await procs[0].store.journal.pending():
                return
            await asyncio.sleep(0.05)


async def test_a_chat_spread_over_two_processes_is_answered_once_in_order(pg_url, tmp_path):
    sent: list = []
    async with Process(tmp_path / "a", pg_url, sent, FakeLLM(latency=0.03)) as a, \
            Process(tmp_path / "b", pg_url, sent, FakeLLM(latency=0.03)) as b:
        for i in range(12):
            await (a if i % 2 == 0 else b).say(f"m{i}", chat_id=str(100 + i % 3))
        await settle(a, b)
        for chat in range(3):
            answers = [t for m, t in sent if m.chat_id == str(100 + chat)]
            assert answers == [f"echo: m{i}" for i in range(12) if i % 3 == chat]
        assert a.llm.calls + b.llm.calls == 12


async def test_the_answering_process_sees_what_the_other_one_answered(pg_url, tmp_path):
    sent: list = []
    async with Process(tmp_path / "a", pg_url, sent) as a, Process(tmp_path / "b", pg_url, sent) as b:
        await a.say("my cat is called Tom")
        await settle(a, b)
        await b.say("and my dog is Rex")
        await settle(a, b)
        await a.say("what are my pets called?")  # a's context in memory is stale: b answered meanwhile
        await settle(a, b)
        last = a.llm.history[-1].user_texts()
        assert last[-3:] == ["my cat is called Tom", "and my dog is Rex", "what are my pets called?"]
        stored = await a.store.sessions.load_messages("telegram:100")
        assert [m.seq for m in stored] == list(range(1, 7))  # one history, no seq taken twice


async def test_a_session_held_elsewhere_is_left_to_its_holder_then_taken_over(pg_url, tmp_path):
    sent: list = []
    async with Process(tmp_path / "a", pg_url, sent) as a, Process(tmp_path / "b", pg_url, sent) as b:
        assert await a.locks.try_acquire(session_lock("telegram:100"))  # a "turn" in a
        await b.say("hello")
        await b.dispatcher.wait_idle()
        assert sent == [] and len(await b.store.journal.pending()) == 1
        await a.locks.close()  # a dies: the server frees its locks
        async with asyncio.timeout(30):
            while not sent:  # the sweep finds the message nobody holds
                await b.dispatcher.claims.sweep()
                await asyncio.sleep(0.2)
        await settle(b)
        assert [t for _, t in sent] == ["echo: hello"]
        assert b.llm.calls == 1


async def test_a_dead_process_kept_reply_is_sent_not_made_again(pg_url, tmp_path):
    sent: list = []
    async with Process(tmp_path / "a", pg_url, sent) as a:
        msg = a.channel.message("hi", message_id="dead-1")
        inbox_id = await journal_elsewhere(a, "dead-1", msg.to_json(), {"role": "user", "content": "hi"})
        await a.store.sessions.append(SESSION.session_id, [{"role": "assistant", "content": "kept answer"}])
        await a.store.journal.keep_reply(inbox_id, "kept answer")
        assert await a.dispatcher.claims.sweep() == 1
        await settle(a)
        assert [t for _, t in sent] == ["kept answer"]
        assert a.llm.calls == 0


async def test_a_redelivery_of_an_orphaned_message_is_answered_once(pg_url, tmp_path):
    sent: list = []
    async with Process(tmp_path / "a", pg_url, sent) as a:
        msg = a.channel.message("orphan", message_id="r-1")
        await journal_elsewhere(a, "r-1", msg.to_json())
        await a.dispatcher.handle(msg)  # the platform delivers it again: a journal duplicate
        await a.dispatcher.handle(msg)
        await settle(a)
        assert [t for _, t in sent] == ["echo: orphan"]


async def test_an_admin_granted_by_another_process_is_an_admin_here(pg_url, tmp_path):
    sent: list = []
    async with Process(tmp_path / "a", pg_url, sent) as a, Process(tmp_path / "b", pg_url, sent) as b:
        msg = b.channel.message("/config", user_id="7", chat_id="7")
        assert not await b.dispatcher.admins.is_admin_now(msg)
        await a.store.admins.grant("telegram:7")  # /auth answered by process a
        assert await b.dispatcher.admins.is_admin_now(msg)


async def test_a_journal_row_that_cannot_be_read_is_dropped_once_not_retried_forever(pg_url, tmp_path, caplog):
    sent: list = []
    async with Process(tmp_path / "a", pg_url, sent) as a:
        await journal_elsewhere(a, "bad-1", {"channel": "telegram"})
        await journal_elsewhere(a, "ok-1", a.channel.message("after it", message_id="ok-1").to_json())
        assert await a.dispatcher.claims.sweep() == 1
        await settle(a)
        assert [t for _, t in sent] == ["echo: after it"]
        assert await a.dispatcher.claims.sweep() == 0
        assert sum("cannot be answered" in r.getMessage() for r in caplog.records) == 1


async def test_a_channel_only_its_own_process_can_reply_through_is_not_claimed(pg_url, tmp_path):
    sent: list = []
    async with Process(tmp_path / "a", pg_url, sent) as a:
        a.channel.answered_anywhere = False  # like a terminal or a WeChat login
        other = a.channel.message("another process's", message_id="elsewhere-1")
        await journal_elsewhere(a, "elsewhere-1", other.to_json())
        assert await a.dispatcher.claims.sweep() == 0  # not this process's to answer
        await a.say("mine", chat_id="200")
        await a.dispatcher.wait_idle()
        assert [t for _, t in sent] == ["echo: mine"] and a.dispatcher.claims.local == {}
        assert [r.session_id for r in await a.store.journal.pending()] == ["telegram:100"]
