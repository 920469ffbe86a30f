"""Tests for dispatcher/dispatcher.py with a recording channel, the fake model and a real SQLite store."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest

from agent.loop import Agent
from agent.sessions import LoggingDropSink, SessionManager
from agent.tools.base import ToolRegistry
from config.settings import Config, ConfigHolder
from core.errors import TransientLLMError
from core.records import SessionInfo
from dispatcher.commands import Command, CommandRegistry
from dispatcher.dispatcher import Dispatcher
from dispatcher.replies import ADMIN_ONLY_REPLY, TEXT_ONLY_REPLY, TRANSIENT_REPLY
from store.store import Store
from tests.fakes.channel import RecordingChannel
from tests.fakes.fake_llm import FakeLLM


class Bot:
    """A dispatcher with its parts, over one database file."""

    def __init__(self, tmp_path, llm: FakeLLM | None = None, **settings) -> None:
        self.config = ConfigHolder(Config(data_dir=str(tmp_path), **settings))
        self.store = Store(f"sqlite:///{tmp_path / 'chatbot.db'}")
        self.llm = llm or FakeLLM()
        self.channel = RecordingChannel()

    async def __aenter__(self) -> Bot:
        await self.store.open()
        sink = LoggingDropSink()
        self.sessions = SessionManager(self.store, self.config, sink)
        self.agent = Agent(llm=self.llm, tools=ToolRegistry(), store=self.store, config=self.config, sink=sink)
        self.commands = CommandRegistry()
        self.dispatcher = Dispatcher(config=self.config, store=self.store, agent=self.agent,
                                     sessions=self.sessions, commands=self.commands)
        self.dispatcher.add_channel(self.channel)
        return self

    async def __aexit__(self, *exc) -> None:
        await self.dispatcher.drain(5)
        await self.store.close()

    async def say(self, text: str, **kw) -> None:
        await self.dispatcher.handle(self.channel.message(text, **kw))


async def test_private_message_is_answered_and_stored(tmp_path):
    async with Bot(tmp_path) as bot:
        await bot.say("hello")
        assert await bot.channel.wait_for(1) == ["echo: hello"]
        await bot.dispatcher.wait_idle()
        stored = await bot.store.sessions.load_messages("telegram:100")
        assert [m.message for m in stored] == [{"role": "user", "content": "hello"},
                                               {"role": "assistant", "content": "echo: hello"}]
        assert await bot.store.journal.pending() == []


async def test_duplicate_message_id_is_answered_once(tmp_path):
    async with Bot(tmp_path) as bot:
        await bot.say("hi", message_id="7")
        await bot.say("hi", message_id="7")
        await bot.dispatcher.wait_idle()
        assert bot.channel.texts() == ["echo: hi"]
        assert len(bot.llm.history) == 1


async def test_dedup_survives_a_restart(tmp_path):
    async with Bot(tmp_path) as bot:
        await bot.say("hi", message_id="9")
        await bot.dispatcher.wait_idle()
    async with Bot(tmp_path) as bot:
        await bot.say("hi", message_id="9")
        await bot.dispatcher.wait_idle()
        assert bot.channel.texts() == []


async def test_one_session_in_order_sessions_concurrently(tmp_path):
    llm = FakeLLM(latency=0.05)
    async with Bot(tmp_path, llm) as bot:
        for i in range(5):
            await bot.say(f"a{i}", chat_id="1", user_id="1")
            await bot.say(f"b{i}", chat_id="2", user_id="2")
        await bot.dispatcher.wait_idle()
        a = [t for m, t in bot.channel.sent if m.chat_id == "1"]
        b = [t for m, t in bot.channel.sent if m.chat_id == "2"]
        assert a == [f"echo: a{i}" for i in range(5)]
        assert b == [f"echo: b{i}" for i in range(5)]
        # the two sessions overlapped: 10 turns at 50 ms took well under 10 x 50 ms in sequence
        user_counts = [len(r.user_texts()) for r in llm.history if "a" in r.user_texts()[-1]]
        assert user_counts == [1, 2, 3, 4, 5]


async def test_submit_queues_each_session_in_arrival_order_without_waiting(tmp_path):
    llm = FakeLLM(latency=0.02)
    async with Bot(tmp_path, llm) as bot:
        for i in range(5):
            # through the channel, as add_channel wired it: the dispatcher's synchronous submit
            bot.channel.deliver_nowait(bot.channel.message(f"a{i}", chat_id="1", user_id="1"))
            bot.channel.deliver_nowait(bot.channel.message(f"b{i}", chat_id="2", user_id="2"))
        queue = bot.dispatcher.queue
        assert sorted(queue.sessions()) == ["telegram:1", "telegram:2"]  # queued before any await
        assert [i.accepted.text for i in queue.queued("telegram:1")] == [f"a{i}" for i in range(5)]
        await bot.dispatcher.wait_idle()
        a = [t for m, t in bot.channel.sent if m.chat_id == "1"]
        b = [t for m, t in bot.channel.sent if m.chat_id == "2"]
        assert a == [f"echo: a{i}" for i in range(5)]
        assert b == [f"echo: b{i}" for i in range(5)]
        stored = await bot.store.sessions.load_messages("telegram:1")
        assert [m.message["content"] for m in stored if m.message["role"] == "user"] == [f"a{i}" for i in range(5)]
        assert await bot.store.journal.pending() == []


async def test_concurrency_is_bounded(tmp_path):
    llm = FakeLLM(latency=0.05)
    running = peak = 0
    original = llm.complete

    async def counting(*args, **kw):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            return await original(*args, **kw)
        finally:
            running -= 1

    llm.complete = counting
    async with Bot(tmp_path, llm, max_concurrent_turns=3) as bot:
        for i in range(10):
            await bot.say("x", chat_id=str(i), user_id=str(i))
        await bot.dispatcher.wait_idle()
        assert len(bot.channel.sent) == 10
        assert peak == 3


async def test_group_rules(tmp_path):
    async with Bot(tmp_path, group_name_white_list=["Team"], timezone="Asia/Shanghai") as bot:
        sent = datetime(2026, 3, 10, 1, 5, tzinfo=UTC)
        await bot.say("just chatting", is_group=True, group_name="Team", chat_id="-1", time=sent)
        await bot.say("@bot hi", is_group=True, group_name="Other", chat_id="-2")
        await bot.say("@bot hi", is_group=True, group_name="Team", chat_id="-1", user_name="Bob", user_id="5")
        await bot.dispatcher.wait_idle()
        # The untriggered message is shown with the request (at 09:05 Shanghai time), but never stored as a turn.
        assert bot.channel.texts() == [
            "echo: [Said in this group since your last answer here, not addressed to you]\n"
            "[09:05 Alice] just chatting\n\n---\n\n[Bob] hi"]
        assert await bot.store.sessions.get("telegram:group:-1:5") is not None
        stored = await bot.store.sessions.load_messages("telegram:group:-1:5")
        assert stored[0].message == {"role": "user", "content": "[Bob] hi"}


async def test_shared_group_session_keeps_speaker_names(tmp_path):
    async with Bot(tmp_path, group_shared_session=True) as bot:
        await bot.say("@bot I am Alice", is_group=True, group_name="G", chat_id="-1", user_name="Alice", user_id="1")
        await bot.say("@bot I am Bob", is_group=True, group_name="G", chat_id="-1", user_name="Bob", user_id="2")
        await bot.dispatcher.wait_idle()
        texts = bot.llm.history[-1].user_texts()
        assert texts == ["[Alice] I am Alice", "[Bob] I am Bob"]


async def test_non_text_in_private_gets_a_note_without_the_model(tmp_path):
    async with Bot(tmp_path) as bot:
        await bot.say("", content_type="sticker")
        await bot.say("", content_type="sticker", is_group=True, group_name="G", chat_id="-1")
        await bot.dispatcher.wait_idle()
        assert bot.channel.texts() == [TEXT_ONLY_REPLY]
        assert bot.llm.history == []


async def test_commands_never_reach_the_model(tmp_path):
    async def secret(request):
        return "secret ok"

    async with Bot(tmp_path) as bot:
        bot.commands.register(Command("secret", "admin thing", secret, admin_only=True))
        await bot.say("/secret")
        await bot.say("/secret@testbot", chat_id="-1", user_id="3", is_group=True, group_name="G")
        await bot.say("/secret@otherbot", chat_id="-1", user_id="3", is_group=True, group_name="G")
        await bot.say("/nope")
        await bot.dispatcher.wait_idle()
        assert bot.channel.texts() == ["Sorry, /secret is for admins only.",
                                       ADMIN_ONLY_REPLY.format(command="secret"),
                                       "Unknown command /nope. Send /help for the list."]
        assert bot.llm.history == []


async def test_model_outage_gets_a_clear_reply_and_keeps_the_message(tmp_path):
    llm = FakeLLM().enqueue(TransientLLMError("down", status=503))
    async with Bot(tmp_path, llm) as bot:
        await bot.say("are you there?")
        await bot.dispatcher.wait_idle()
        assert bot.channel.texts() == [TRANSIENT_REPLY]
        stored = await bot.store.sessions.load_messages("telegram:100")
        assert [m.message["content"] for m in stored] == ["are you there?"]
        await bot.say("again")
        await bot.dispatcher.wait_idle()
        assert bot.channel.texts()[-1] == "echo: again"


async def test_crash_resume_answers_exactly_once(tmp_path):
    gate = asyncio.Event()
    llm = FakeLLM()
    original = llm.complete

    async def hang(*args, **kw):
        await gate.wait()
        return await original(*args, **kw)

    llm.complete = hang
    async with Bot(tmp_path, llm) as bot:
        await bot.say("remember this")
        await asyncio.sleep(0.05)
        # the process "dies" mid-turn: the turn is cancelled, nothing was answered
        assert await bot.dispatcher.drain(0.01) is False
        assert bot.channel.texts() == []
    async with Bot(tmp_path) as bot:
        assert await bot.dispatcher.resume_pending() == 1
        await bot.dispatcher.wait_idle()
        # the answer comes after a restart: it quotes the question it answers (issue 40)
        assert bot.channel.texts() == ["> remember this\n\necho: remember this"]
        stored = await bot.store.sessions.load_messages("telegram:100")
        assert [m.message["role"] for m in stored] == ["user", "assistant"]
    async with Bot(tmp_path) as bot:
        assert await bot.dispatcher.resume_pending() == 0


async def test_an_answer_is_marked_before_the_next_turn_reaches_the_model(tmp_path):
    llm = FakeLLM()
    original = llm.complete
    pending_at_call: list[list[str]] = []
    both_queued = asyncio.Event()

    async def watch(*args, **kw):
        await both_queued.wait()
        pending_at_call.append([p.payload["text"] for p in await bot.store.journal.pending()])
        return await original(*args, **kw)

    llm.complete = watch
    async with Bot(tmp_path, llm) as bot:
        await bot.say("one")
        await bot.say("two")
        await asyncio.sleep(0.05)  # both journalled; "two" waits for "one"
        both_queued.set()
        assert await bot.channel.wait_for(2) == ["echo: one", "echo: two"]
    # a crash while the model works on "two" must not answer "one" again after the restart
    assert pending_at_call == [["one", "two"], ["two"]]


@pytest.mark.parametrize("hooked", [False, True])
async def test_the_reply_is_kept_before_it_is_sent(tmp_path, hooked):
    async with Bot(tmp_path) as bot:
        kept_at_send: list[dict[int, str]] = []
        record = bot.channel.send

        async def send(to, text):
            kept_at_send.append(await bot.store.journal.pending_replies())
            await record(to, text)

        async def shout(msg, reply):
            return reply.upper()

        bot.channel.send = send
        if hooked:  # a plugin changes the reply after the agent kept its own: the changed one is kept
            bot.dispatcher.hooks.after_reply = shout
        await bot.say("hello")
        await bot.dispatcher.wait_idle()
        reply = "ECHO: HELLO" if hooked else "echo: hello"
        assert bot.channel.texts() == [reply]
        assert [list(kept.values()) for kept in kept_at_send] == [[reply]]
        assert await bot.store.journal.pending_replies() == {}  # marked done once sent


async def test_resume_finds_the_answer_of_its_own_turn_when_later_turns_exist(tmp_path):
    async with Bot(tmp_path) as bot:
        msg1, msg2 = bot.channel.message("first"), bot.channel.message("second")
        info = SessionInfo(session_id="telegram:100", channel="telegram", chat_id="100", user_id="100")
        await bot.store.sessions.ensure(info)
        first, _ = await bot.store.journal.record_incoming("telegram", msg1.message_id, info.session_id, msg1.to_json(),
                                                   {"role": "user", "content": "first"})
        await bot.store.sessions.append(info.session_id, [{"role": "assistant", "content": "answer one"}])
        second, _ = await bot.store.journal.record_incoming("telegram", msg2.message_id, info.session_id,
                                                            msg2.to_json(),
                                                    {"role": "user", "content": "second"})
        await bot.store.sessions.append(info.session_id, [{"role": "assistant", "content": "answer two"}])
        await bot.store.journal.mark_done(second)  # "first" was sent, then the process died before marking it
        assert [p.id for p in await bot.store.journal.pending()] == [first]
    async with Bot(tmp_path) as bot:
        assert await bot.dispatcher.resume_pending() == 1
        await bot.dispatcher.wait_idle()
        # its own stored answer, not the session's last one, under its question (issue 40)
        assert bot.channel.texts() == ["> first\n\nanswer one"]
        assert bot.llm.calls == 0


@pytest.mark.parametrize("admin", ["telegram:100", None])
async def test_admins(tmp_path, admin):
    async with Bot(tmp_path, admin_users=[admin] if admin else []) as bot:
        assert bot.dispatcher.admins.is_admin(bot.channel.message("x")) is bool(admin)
        terminal = RecordingChannel("terminal")
        bot.dispatcher.add_channel(terminal)  # the operator's own channel: its user is an admin
        assert bot.dispatcher.admins.is_admin(terminal.message("x"))


async def test_a_password_is_never_journalled(tmp_path):
    async def auth(request):
        return "ok"

    async with Bot(tmp_path) as bot:
        bot.commands.register(Command("auth", "become admin", auth, private_only=True))
        await bot.say("/auth hunter2")
        await bot.dispatcher.wait_idle()
        assert bot.channel.texts() == ["ok"]
    import sqlite3

    db = sqlite3.connect(tmp_path / "chatbot.db")
    try:
        payloads = [row[0] for row in db.execute("SELECT payload FROM inbox")]
    finally:
        db.close()
    assert len(payloads) == 1 and "hunter2" not in payloads[0]


@pytest.mark.parametrize("intake", ["handle", "submit"])
async def test_messages_arriving_during_shutdown_are_answered_after_restart(tmp_path, intake):
    llm = FakeLLM(latency=0.3)
    async with Bot(tmp_path, llm) as bot:
        await bot.say("first")
        await asyncio.sleep(0.05)
        drain = asyncio.create_task(bot.dispatcher.drain(5))
        await asyncio.sleep(0)
        if intake == "handle":
            await bot.say("sent while stopping")
        else:
            bot.dispatcher.submit(bot.channel.message("sent while stopping"))
        assert await drain is True
        assert bot.channel.texts() == ["echo: first"]
    async with Bot(tmp_path) as bot:
        assert await bot.dispatcher.resume_pending() == 1
        await bot.dispatcher.wait_idle()
        assert bot.channel.texts() == ["> sent while stopping\n\necho: sent while stopping"]


async def test_a_failed_journal_write_during_shutdown_is_logged(tmp_path, caplog):
    async with Bot(tmp_path) as bot:
        await bot.dispatcher.drain(5)
        await bot.store.close()  # the write fails for real
        try:
            with caplog.at_level(logging.ERROR, logger="dispatcher.journal"):
                bot.dispatcher.submit(bot.channel.message("late"))
                await bot.dispatcher.flush_intake()
        finally:
            await bot.store.open()
    [record] = [r for r in caplog.records if r.name == "dispatcher.journal"]
    assert record.getMessage() == "could not journal a message received during shutdown"
    assert record.exc_info is not None and str(record.exc_info[1]) == "store is not open"


async def test_an_ignored_message_is_logged_at_debug_with_its_reason_and_gets_no_reply(tmp_path, caplog):
    async with Bot(tmp_path, single_chat_prefix=["bot"], group_chat_prefix=["@bot"]) as bot:
        with caplog.at_level(logging.DEBUG, logger="dispatcher.intake"):
            await bot.say("hello", message_id="41")
            await bot.say("chatting", message_id="42", chat_id="-5", is_group=True)
            await bot.say("bot hello", message_id="43")
            assert await bot.channel.wait_for(1) == ["echo: hello"]
        await bot.dispatcher.wait_idle()
        ignored = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG and "ignored" in r.getMessage()]
        assert ignored == [
            'telegram message 41 in 100 ignored: it does not start with one of single_chat_prefix ["bot"]: start it '
            'with one, or set single_chat_prefix to [""] to answer every message',
            "telegram message 42 in -5 ignored: it does not trigger the bot (group_chat_prefix, an @mention, "
            "group_chat_keyword or a reply)"]
        assert bot.channel.texts() == ["echo: hello"]
