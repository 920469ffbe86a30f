"""The feishu channel on the test's loop against the fake Feishu server (tests/fakes/feishu_server.py): lark-oapi's
own WebSocket client and API client, pointed at the fake by ``feishu_domain``."""

from __future__ import annotations

import asyncio
import logging

import pytest

from channels.feishu.api import card, domain_url
from channels.feishu.channel import MESSAGE_LIMIT, FeishuChannel, message_text
from config.settings import Config
from core.messages import IncomingMessage
from tests.fakes.feishu_server import APP_ID, APP_SECRET, FakeFeishu


class Bot:
    """A feishu channel whose handler records every message and answers ``echo: <text>``."""

    def __init__(self, fs: FakeFeishu, secret: str = APP_SECRET) -> None:
        self.channel = FeishuChannel(Config(feishu_app_id=APP_ID, feishu_app_secret=secret,
                                            feishu_domain=fs.base_url))
        self.channel.edit_interval = 0.05
        self.received: list[IncomingMessage] = []
        self.journal: set[str] = set()
        self.refuse = False
        self.channel.set_handler(self._handle)

    async def _handle(self, msg: IncomingMessage) -> bool:
        if self.refuse:
            return False
        if msg.message_id in self.journal:
            return True  # a duplicate: taken, not answered again
        self.journal.add(msg.message_id)
        self.received.append(msg)
        if not msg.is_group or msg.mentions_bot:
            await self.channel.send(msg, "echo: " + msg.text)
        return True


@pytest.fixture
def fs():
    with FakeFeishu() as server:
        yield server


async def until(check, within: float = 10.0) -> None:
    async with asyncio.timeout(within):
        while not check():  # noqa: ASYNC110 - the state changes in other threads
            await asyncio.sleep(0.02)


def test_the_domain_setting_names_feishu_lark_or_a_base_url():
    assert domain_url("feishu") == "https://open.feishu.cn"
    assert domain_url("lark") == "https://open.larksuite.com"
    assert domain_url("http://127.0.0.1:8080/") == "http://127.0.0.1:8080"


def test_post_messages_are_read_as_text():
    content = {"zh_cn": {"title": "Plan", "content": [[{"tag": "text", "text": "buy "},
                                                       {"tag": "a", "text": "milk", "href": "x"}],
                                                      [{"tag": "at", "user_id": "ou_1", "user_name": "Bob"}]]}}
    assert message_text("post", content) == "Plan\nbuy milk\n@Bob"
    assert "update_multi" in card("x")


async def test_private_and_group_messages_are_journalled_before_the_ack_and_answered(fs):
    fs.chats["oc_group"] = "Team"
    fs.users["ou_bob"] = "Bob"
    bot = Bot(fs)
    await bot.channel.start()
    try:
        assert bot.channel.bot_open_id == fs.bot_open_id
        first = fs.push_text("oc_dm", "hello")
        await asyncio.to_thread(fs.wait_texts, "oc_dm", 1)
        assert fs.texts("oc_dm") == ["echo: hello"]
        await asyncio.to_thread(fs.wait_acked, first)
        fs.push_text("oc_group", "just chatting", sender="ou_bob", group=True)
        mid = fs.push_text("oc_group", "what time is it?", sender="ou_bob", group=True, mention_bot=True,
                           mentions={"ou_carol": "Carol"})
        await asyncio.to_thread(fs.wait_texts, "oc_group", 1)
        await asyncio.to_thread(fs.wait_acked, mid)
        background, asked = bot.received[1:]
        assert (background.is_group, background.mentions_bot, background.group_name) == (True, False, "Team")
        assert (asked.mentions_bot, asked.user_name, asked.text) == (True, "Bob", "what time is it? @Carol")
        assert fs.texts("oc_group") == ["echo: what time is it? @Carol"]
        assert fs.messages_in("oc_group")[0].reply_to == mid, "in a group the answer replies to the question"
        assert fs.messages_in("oc_dm")[0].reply_to == ""
        # Feishu delivers an event again: taken (acked) once more, not answered twice
        fs.redeliver(first)
        await asyncio.to_thread(fs.wait_acked, first, 2)
        assert fs.texts("oc_dm") == ["echo: hello"]
    finally:
        await bot.channel.stop()


async def test_a_message_the_journal_refuses_is_not_acked_and_comes_again(fs):
    bot = Bot(fs)
    bot.refuse = True
    await bot.channel.start()
    try:
        mid = fs.push_text("oc_dm", "keep me")
        frame = fs.frames_of[mid]
        await until(lambda: fs.deliveries.get(frame, 0) >= 1)
        await asyncio.sleep(0.3)
        assert fs.acked.get(frame, 0) == 0
        bot.refuse = False
        fs.drop_connection()  # the SDK connects again; Feishu sends what was not acked
        await asyncio.to_thread(fs.wait_acked, mid)
        assert fs.texts("oc_dm") == ["echo: keep me"]
    finally:
        await bot.channel.stop()


async def test_a_bad_secret_is_one_line_and_the_channel_fails(fs, caplog):
    caplog.set_level(logging.INFO)
    bot = Bot(fs, secret="wrong")
    await bot.channel.start()
    assert bot.channel.failed.is_set()
    assert "feishu_app_secret was rejected (app secret invalid)" in (bot.channel.failure or "")
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1 and "other channels keep running" in errors[0].getMessage()
    assert fs.connections == 0
    await bot.channel.stop()


async def test_a_long_answer_is_split_into_cards_in_order(fs):
    bot = Bot(fs)
    await bot.channel.start()
    try:
        answer = "\n\n".join(f"part {i} " + "x" * 990 for i in range(8))
        msg = IncomingMessage(channel="feishu", chat_id="oc_dm", user_id="ou_alice", text="")
        await bot.channel.send(msg, answer)
        pieces = fs.texts("oc_dm")
        assert len(pieces) == 2 and all(len(p) <= MESSAGE_LIMIT for p in pieces)
        assert "\n\n".join(pieces) == answer
    finally:
        await bot.channel.stop()


async def test_a_streamed_answer_is_one_card_patched_in_place(fs):
    bot = Bot(fs)
    await bot.channel.start()
    try:
        msg = IncomingMessage(channel="feishu", chat_id="oc_dm", user_id="ou_alice", text="")
        stream = bot.channel.open_stream(msg)
        assert stream is not None
        words = [f"word{i}" for i in range(30)]
        for n in range(1, len(words) + 1):
            await stream.push(" ".join(words[:n]))
            await asyncio.sleep(0.01)
        await stream.finish(" ".join(words) + ".")
        messages = fs.messages_in("oc_dm")
        assert len(messages) == 1
        assert messages[0].text == " ".join(words) + "."
        assert len(messages[0].versions) >= 2, "shown before the end, then updated"
        # past the card limit the answer goes on in a new card
        long = "y" * (MESSAGE_LIMIT - 10) + "\n\n" + "z" * 50
        stream = bot.channel.open_stream(msg)
        await stream.push(long[:100])
        await until(lambda: len(fs.messages_in("oc_dm")) == 2)
        await stream.push(long)
        await stream.finish(long)
        assert fs.texts("oc_dm")[1:] == ["y" * (MESSAGE_LIMIT - 10), "z" * 50]
    finally:
        await bot.channel.stop()
