"""The Telegram channel, with the real python-telegram-bot talking to the fake Bot API server."""

from __future__ import annotations

import asyncio
import logging
import socket
from datetime import UTC, datetime

import pytest
from telegram.error import TelegramError

from channels.telegram.channel import TOKEN_REJECTED, TelegramChannel
from channels.telegram.text import render_chunks, split_text, utf16_len
from config.settings import Config
from core.messages import IncomingMessage
from dispatcher.commands import Command, CommandRegistry
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.fakes.telegram_html import parse_telegram_html


def make_config(api: FakeTelegramAPI, **overrides) -> Config:
    values = {"channel_type": "telegram", "telegram_bot_token": api.token, "telegram_base_url": api.base_url,
              "telegram_rate_limit": False}
    values.update(overrides)
    return Config(**values)


class Inbox:
    """Collects what the channel delivers."""

    def __init__(self) -> None:
        self.messages: list[IncomingMessage] = []
        self.changed = asyncio.Condition()

    async def __call__(self, msg: IncomingMessage) -> None:
        async with self.changed:
            self.messages.append(msg)
            self.changed.notify_all()

    async def wait(self, n: int, within: float = 5.0) -> list[IncomingMessage]:
        async with asyncio.timeout(within), self.changed:
            await self.changed.wait_for(lambda: len(self.messages) >= n)
        return self.messages


@pytest.fixture
def api():
    with FakeTelegramAPI() as server:
        yield server


async def _no_reply(request) -> None:
    return None


def command_registry() -> CommandRegistry:
    registry = CommandRegistry()
    for name, description in (("help", "list the commands"), ("config", "show or change settings"),
                              ("Bad-Name", "not a Telegram command name"), ("long", "x" * 300)):
        registry.register(Command(name=name, description=description, handler=_no_reply))
    return registry


@pytest.fixture
async def channel(api):
    ch = TelegramChannel(make_config(api), commands=command_registry(), poll_timeout=2)
    inbox = Inbox()
    ch.set_handler(inbox)
    ch.inbox = inbox
    await ch.start()
    assert ch.active
    yield ch
    await ch.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- pure helpers ----------------------------------------------------------------------------
def test_split_text_prefers_lines_then_spaces_then_hard():
    text = "a" * 3000 + "\n" + "b" * 3000 + "\n" + "c" * 2999
    assert [len(c) for c in split_text(text)] == [3001, 3001, 2999]
    words = ("word " * 2000).strip()
    chunks = split_text(words)
    assert "".join(chunks) == words and all(len(c) <= 4096 and c.endswith(" ") for c in chunks[:-1])
    assert [len(c) for c in split_text("x" * 9000)] == [4096, 4096, 808]
    assert split_text("short") == ["short"] and split_text("") == []


def test_a_megabyte_splits_at_exact_boundaries():
    lines = ("a" * 99 + "\n") * 10_000  # 1,000,000 characters; 40 lines fit in 4,096
    chunks = split_text(lines)
    assert [len(c) for c in chunks] == [4000] * 250 and all(c.endswith("\n") for c in chunks)
    words = "word " * 200_000  # 819 words and a "w" fit: the cut is after the 819th word's space
    chunks = split_text(words)
    assert [len(c) for c in chunks] == [4095] * 244 + [1_000_000 - 4095 * 244]
    hard = split_text("x" * 1_000_000)
    assert [len(c) for c in hard] == [4096] * 244 + [576]
    wide = split_text("😀" * 500_000)  # two UTF-16 units each
    assert [len(c) for c in wide] == [2048] * 244 + [500_000 - 2048 * 244]


def test_render_chunks_of_a_megabyte_keeps_the_split_boundaries():
    text = ("a" * 99 + "\n") * 10_000
    pairs = render_chunks(text)
    assert [len(src) for src, _ in pairs] == [4000] * 250
    assert all(html == src.rstrip("\n") for src, html in pairs)


def test_split_text_counts_utf16_units():
    text = "😀" * 3000  # 2 units each
    chunks = split_text(text)
    assert [len(c) for c in chunks] == [2048, 952]
    assert all(utf16_len(c) <= 4096 for c in chunks)


def test_render_chunks_keeps_html_under_the_limit():
    text = "a<b & c>d " * 1500  # escapes to twice its length in HTML
    pairs = render_chunks(text)
    assert len(pairs) == 8
    assert "".join(src for src, _ in pairs) == text
    assert all(html is not None and utf16_len(html) <= 4096 for _, html in pairs)
    assert all(parse_telegram_html(html) == src.strip() for src, html in pairs)


def test_render_chunks_reopens_a_split_code_fence():
    code = "\n".join(f"line {i} = {i} * 2" for i in range(600))
    pairs = render_chunks(f"Here:\n```python\n{code}\n```\nDone.")
    assert len(pairs) == 3
    assert all(html.count("<pre>") == 1 and html.count("</pre>") == 1 for _, html in pairs)
    assert pairs[1][1].startswith('<pre><code class="language-python">line')
    assert pairs[2][1].endswith("</code></pre>\n\nDone.")


# --- lifecycle -------------------------------------------------------------------------------
async def test_start_registers_commands_and_username(api, channel):
    assert channel.bot_username == "fake_test_bot"
    assert channel.bot_id == api.bot_id
    # the menu is the command registry, minus names Telegram refuses, descriptions cut to 256 characters
    assert api.commands == [[{"command": "help", "description": "list the commands"},
                             {"command": "config", "description": "show or change settings"},
                             {"command": "long", "description": "x" * 255 + "…"}]]


async def test_without_a_command_registry_no_menu_is_set(api):
    ch = TelegramChannel(make_config(api), poll_timeout=2)
    await ch.start()
    try:
        assert ch.active and api.commands == []
    finally:
        await ch.stop()


async def test_invalid_token_logs_one_line_and_stays_inactive(api, caplog):
    ch = TelegramChannel(make_config(api, telegram_bot_token="123:wrong"))
    with caplog.at_level(logging.WARNING):
        await ch.start()
    assert not ch.active and ch.bot is None and ch.updater is None
    assert [r.getMessage() for r in caplog.records if r.name == "channels.telegram.channel"] == [TOKEN_REJECTED]
    await ch.stop()
    await ch.stop()
    await ch.send(IncomingMessage(channel="telegram", chat_id="1", user_id="1", text=""), "dropped")
    assert api.sent == []


async def test_unreachable_api_leaves_channel_inactive(caplog):
    port = free_port()
    cfg = Config(telegram_bot_token="1:x", telegram_base_url=f"http://127.0.0.1:{port}/bot", telegram_rate_limit=False)
    ch = TelegramChannel(cfg)
    with caplog.at_level(logging.ERROR):
        await ch.start()
    assert not ch.active
    lines = [r.getMessage() for r in caplog.records if r.name == "channels.telegram.channel"]
    assert len(lines) == 1 and lines[0].startswith("telegram: cannot reach the Bot API")


async def test_stop_is_idempotent_and_acknowledges_updates(api, channel):
    api.push_text(5, "hi", user_id=5)
    await channel.inbox.wait(1)
    await channel.stop()
    await channel.stop()
    assert api.pending_updates == 0  # acknowledged: not fetched again on the next start


# --- incoming --------------------------------------------------------------------------------
async def test_private_text_becomes_incoming_message(api, channel):
    before = datetime.now(UTC).replace(microsecond=0)
    upd = api.push_text(42, "Hello **there**", user_id=42, first_name="Ada", last_name="Lovelace")
    [msg] = await channel.inbox.wait(1)
    assert msg.channel == "telegram" and msg.chat_id == "42" and msg.user_id == "42"
    assert msg.user_name == "Ada Lovelace" and msg.text == "Hello **there**"
    assert (msg.is_group, msg.group_name, msg.mentions_bot, msg.reply_to_bot) == (False, "", False, False)
    assert msg.message_id == f"42:{upd['message']['message_id']}"
    assert msg.content_type == "text" and not msg.is_from_bot
    assert msg.time.tzinfo is not None and msg.time >= before


async def test_group_mention_and_reply(api, channel):
    api.push_text(-100, "@Fake_Test_Bot what time is it?", user_id=7, first_name="Bo", chat_type="supergroup",
                  title="Team")
    api.push_text(-100, "and you?", user_id=7, chat_type="supergroup", title="Team", reply_to_bot=True)
    api.push_text(-100, "just chatting", user_id=8, chat_type="group", title="Team")
    first, second, third = await channel.inbox.wait(3)
    assert (first.is_group, first.group_name, first.mentions_bot, first.reply_to_bot) == (True, "Team", True, False)
    assert (second.mentions_bot, second.reply_to_bot) == (False, True)
    assert (third.is_group, third.mentions_bot, third.reply_to_bot) == (True, False, False)


async def test_reply_to_someone_else_carries_the_replied_text_and_author(api, channel):
    chat = dict(chat_type="supergroup", title="Team")
    bob = api.push_text(-7, "we ship on Friday", user_id=2, first_name="Bob", last_name="B", **chat)["message"]
    own = api.push_text(-7, "typo", user_id=1, first_name="Al", **chat)["message"]
    api.push_text(-7, "really?", user_id=1, first_name="Al", reply_to_message=bob, **chat)
    api.push_text(-7, "fixed", user_id=1, first_name="Al", reply_to_message=own, **chat)  # own message: nothing
    api.push_text(-7, "and?", user_id=1, first_name="Al", reply_to_bot=True, **chat)  # the bot's: nothing
    api.push_text(-7, "that part", user_id=1, first_name="Al", reply_to_message=bob, **chat,
                  quote={"text": "Friday", "position": 11})
    _, _, reply, to_own, to_bot, quoted = await channel.inbox.wait(6)
    assert (reply.reply_to_name, reply.reply_to_text) == ("Bob B", "we ship on Friday")
    assert (to_own.reply_to_name, to_own.reply_to_text) == ("", "")
    assert (to_bot.reply_to_name, to_bot.reply_to_text, to_bot.reply_to_bot) == ("", "", True)
    assert (quoted.reply_to_name, quoted.reply_to_text) == ("Bob B", "Friday")


async def test_text_mention_of_the_bot(api, channel):
    entity = {"type": "text_mention", "offset": 0, "length": 3, "user": api.bot_user}
    api.push_text(-5, "Bot, help", user_id=1, chat_type="group", entities=[entity])
    [msg] = await channel.inbox.wait(1)
    assert msg.mentions_bot


async def test_sticker_and_photo_caption(api, channel):
    api.push_sticker(9, user_id=9)
    api.push_message(9, user_id=9, caption="look @fake_test_bot",
                     photo=[{"file_id": "p", "file_unique_id": "pu", "width": 10, "height": 10}])
    api.push_message(-9, user_id=9, chat_type="group", new_chat_members=[{"id": 3, "is_bot": False,
                                                                          "first_name": "N"}])
    api.push_text(9, "after", user_id=9)
    sticker, photo, after = await channel.inbox.wait(3)
    assert (sticker.content_type, sticker.text) == ("sticker", "")
    assert (photo.content_type, photo.text, photo.mentions_bot) == ("photo", "look @fake_test_bot", True)
    assert after.text == "after"  # the service message was not delivered
    await asyncio.sleep(0.05)
    assert len(channel.inbox.messages) == 3


async def test_duplicate_update_is_delivered_twice_with_same_id(api, channel):
    upd = api.push_text(11, "once", user_id=11, message_id=777)
    api.push_update({"message": upd["message"]})
    first, second = await channel.inbox.wait(2)
    assert first.message_id == second.message_id == "11:777"


async def test_submitted_synchronously_in_arrival_order(api, channel):
    submitted: list[tuple[str, str]] = []
    done = asyncio.Event()

    async def awaited(msg: IncomingMessage) -> None:
        raise AssertionError("a channel with a submitter must not await the handler")

    def submit(msg: IncomingMessage) -> None:
        submitted.append((msg.chat_id, msg.text))
        if len(submitted) == 9:
            done.set()

    channel.set_handler(awaited, submit=submit)
    for i in range(3):
        for chat in (1, 2, 3):
            api.push_text(chat, f"m{i}", user_id=chat)
    async with asyncio.timeout(5):
        await done.wait()
    assert submitted == [(str(chat), f"m{i}") for i in range(3) for chat in (1, 2, 3)]


async def test_a_failing_update_is_logged_and_later_ones_still_arrive(api, caplog):
    class BrittleChannel(TelegramChannel):
        def to_incoming(self, message):
            if message.text == "boom":
                raise ValueError("cannot read this one")
            return super().to_incoming(message)

    ch = BrittleChannel(make_config(api), poll_timeout=2)
    inbox = Inbox()
    ch.set_handler(inbox)
    await ch.start()
    try:
        with caplog.at_level(logging.ERROR, logger="channels.telegram.channel"):
            api.push_text(4, "before", user_id=4)
            bad = api.push_text(4, "boom", user_id=4)
            api.push_text(4, "after", user_id=4)
            before, after = await inbox.wait(2)
        assert (before.text, after.text) == ("before", "after")
        [record] = [r for r in caplog.records if r.name == "channels.telegram.channel"]
        assert record.getMessage() == f"telegram: error while handling update {bad['update_id']}"
        assert record.exc_info is not None and str(record.exc_info[1]) == "cannot read this one"
        api.push_text(5, "still running", user_id=5)
        assert (await inbox.wait(3))[2].text == "still running"
    finally:
        await ch.stop()


async def test_a_malformed_update_is_logged_once_and_skipped(api, channel, caplog):
    with caplog.at_level(logging.WARNING):
        api.push_text(4, "before", user_id=4)
        bad = api.push_update({"message": {"message_id": 9, "text": "no date, no chat",
                                           "from": {"id": 4, "is_bot": False, "first_name": "U"}}})
        api.push_text(4, "after", user_id=4)
        before, after = await channel.inbox.wait(2)
        assert (before.text, after.text) == ("before", "after")
        api.push_update({"message": {"message_id": 10, "chat": {"id": 4, "type": "private"}}})  # alone in a batch
        api.push_text(4, "later", user_id=4)
        assert (await channel.inbox.wait(3))[2].text == "later"
        await asyncio.sleep(0.3)  # a few more polls: the bad updates are not fetched again
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.name for r in warnings] == ["channels.telegram.incoming", "channels.telegram.incoming"]
    assert warnings[0].getMessage().startswith(f"telegram: update {bad['update_id']} could not be read (")
    assert warnings[1].getMessage().startswith(f"telegram: update {bad['update_id'] + 2} could not be read (")
    assert all("no date" not in r.getMessage() for r in caplog.records)  # bodies are not logged
    assert api.pending_updates == 0 and len(channel.inbox.messages) == 3


async def test_messages_from_other_bots_are_marked(api, channel):
    api.push_text(-7, "@fake_test_bot hello from a bot", user_id=555, chat_type="group", is_bot=True)
    api.push_text(8, "hello from a bot", user_id=8, is_bot=True)
    api.push_text(8, "hello from a person", user_id=8)
    group, private_bot, person = await channel.inbox.wait(3)
    assert (group.is_from_bot, private_bot.is_from_bot, person.is_from_bot) == (True, True, False)


async def test_one_chat_in_order_while_another_runs(api, channel):
    release = asyncio.Event()
    seen: list[str] = []
    changed = asyncio.Condition()

    async def slow(msg: IncomingMessage) -> None:
        if msg.text == "slow":
            await release.wait()
        async with changed:
            seen.append(msg.text)
            changed.notify_all()

    channel.set_handler(slow)
    api.push_text(1, "slow", user_id=1)
    api.push_text(1, "after slow", user_id=1)
    api.push_text(2, "other chat", user_id=2)
    async with asyncio.timeout(5), changed:
        await changed.wait_for(lambda: seen == ["other chat"])
    release.set()
    async with asyncio.timeout(5), changed:
        await changed.wait_for(lambda: len(seen) == 3)
    assert seen == ["other chat", "slow", "after slow"]


# --- outgoing --------------------------------------------------------------------------------
def private(chat_id: int = 42) -> IncomingMessage:
    return IncomingMessage(channel="telegram", chat_id=str(chat_id), user_id=str(chat_id), text="q",
                           message_id=f"{chat_id}:1")


async def test_long_reply_is_split(api, channel):
    text = "\n".join(f"line {i:05d} " + "x" * 80 for i in range(100))  # 9,099 characters
    assert len(text) > 9000
    await channel.send(private(), text)
    sent = api.sent
    assert len(sent) == 3
    assert all(len(s["text"]) <= 4096 for s in sent)
    assert "".join(parse_telegram_html(s["text"]) for s in sent).replace("\n", "") == text.replace("\n", "")
    assert {s["parse_mode"] for s in sent} == {"HTML"}


async def test_plain_text_split_rejoins_exactly(api, channel):
    api.reject_html = True
    text = "".join(f"{i} " for i in range(2500))[:9000]
    await channel.send(private(), text)
    assert len(api.sent) == 3
    assert "".join(s["text"] for s in api.sent) == text
    assert all(len(s["text"]) <= 4096 and s["parse_mode"] is None for s in api.sent)


async def test_markdown_rendered_as_html(api, channel):
    await channel.send(private(), "**Bold** and `a<b` & [link](https://example.com)")
    [sent] = api.sent
    assert sent["parse_mode"] == "HTML"
    assert sent["text"] == '<b>Bold</b> and <code>a&lt;b</code> &amp; <a href="https://example.com">link</a>'


async def test_rejected_markup_falls_back_to_plain_text(api, channel, caplog):
    api.reject_html = True
    await channel.send(private(), "**Bold** text")
    [sent] = api.sent
    assert (sent["text"], sent["parse_mode"]) == ("**Bold** text", None)
    html_calls = [p for m, p in api.calls if m == "sendMessage" and p.get("parse_mode") == "HTML"]
    assert len(html_calls) == 1


async def test_group_reply_answers_the_triggering_message(api, channel):
    to = IncomingMessage(channel="telegram", chat_id="-100", user_id="7", text="q", is_group=True,
                         message_id="-100:55")
    await channel.send(to, "answer")
    [sent] = api.sent
    assert sent["params"]["reply_parameters"] == {"message_id": 55, "allow_sending_without_reply": True}


async def test_flood_limit_is_retried(api, channel):
    api.fail_next("sendMessage", 429, "Too Many Requests: retry after 1", {"retry_after": 1})
    await channel.send(private(), "hello")
    assert [s["text"] for s in api.sent] == ["hello"]


async def test_a_megabyte_reply_does_not_hold_up_the_loop(api, channel):
    """The reply is rendered in a worker thread: the loop goes on ticking before the first piece is sent. Inline,
    the rendering (~0.2 s of CPU) would run before the send's first await, and no tick could come before it."""
    api.reject_html = False
    ticks_before_first_send = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks_before_first_send
        while not stop.is_set():
            await asyncio.sleep(0.005)
            if not any(method == "sendMessage" for method, _ in api.calls):
                ticks_before_first_send += 1

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)  # the ticker is waiting on its first sleep
    text = ("a" * 99 + "\n") * 10_000
    await channel.send(private(), text)
    stop.set()
    await task
    assert len(api.sent) == 250 and "".join(s["text"] + "\n" for s in api.sent) == text
    assert ticks_before_first_send >= 5  # rendering ran in a worker thread while the loop went on


async def test_typing_action_and_errors_ignored(api, channel):
    await channel.typing(private(42))
    assert api.actions == [{"chat_id": 42, "action": "typing"}]
    api.fail_next("sendChatAction", 403, "Forbidden: bot was blocked by the user")
    await channel.typing(private(42))
    assert len(api.actions) == 1


async def test_end_to_end_echo(api, channel):
    async def echo(msg: IncomingMessage) -> None:
        await channel.send(msg, "you said: " + msg.text)

    channel.set_handler(echo)
    api.push_text(3, "ping", user_id=3)
    [sent] = await api.wait_for_sent(1)
    assert (sent["chat_id"], sent["text"]) == (3, "you said: ping")


# --- webhook ---------------------------------------------------------------------------------
async def test_webhook_mode(api):
    port = free_port()
    url = f"http://127.0.0.1:{port}/tg-hook"
    ch = TelegramChannel(make_config(api, telegram_mode="webhook", telegram_webhook_url=url,
                                     telegram_webhook_port=port))
    inbox = Inbox()
    ch.set_handler(inbox)
    await ch.start()
    try:
        assert ch.active
        assert api.webhook == {"url": url, "secret_token": ch.webhook_secret, "allowed_updates": ["message"]}
        assert not any(m == "getUpdates" for m, _ in api.calls)
        api.push_text(21, "via webhook", user_id=21)
        [msg] = await inbox.wait(1)
        assert (msg.chat_id, msg.text) == ("21", "via webhook")
        await api.wait_for(lambda: api.webhook_deliveries == [200])
        # a forged post without the secret is refused
        api.webhook["secret_token"] = "forged"
        api.push_text(21, "forged", user_id=21)
        await api.wait_for(lambda: len(api.webhook_deliveries) == 2)
        assert api.webhook_deliveries[1] == 403 and len(inbox.messages) == 1
    finally:
        await ch.stop()


async def test_edit_slots_keep_a_group_within_its_pace_but_allow_a_short_burst():
    from channels.telegram.channel import EDIT_INTERVAL, GROUP_EDIT_BURST, GROUP_EDIT_INTERVAL
    from config.settings import Config

    ch = TelegramChannel(Config(channel_type="telegram", telegram_bot_token="1:x"))
    group = [ch.edit_slot(-100, is_group=True) for _ in range(GROUP_EDIT_BURST + 3)]
    # the first calls go at once, then one every GROUP_EDIT_INTERVAL seconds
    assert [round(w, 2) for w in group] == [0.0] * GROUP_EDIT_BURST + [
        round(GROUP_EDIT_INTERVAL * k, 2) for k in range(1, 4)]
    private = [ch.edit_slot(42, is_group=False) for _ in range(3)]
    assert [round(w, 2) for w in private] == [0.0, EDIT_INTERVAL, 2 * EDIT_INTERVAL]
    ch.hold_chat(42, 30)
    assert ch.edit_slot(42, is_group=False) >= 29.9


async def test_send_file_uploads_a_document_answering_in_its_topic(api, channel, tmp_path):
    path = tmp_path / "export.zip"
    path.write_bytes(b"PK\x03\x04" + bytes(range(256)))
    to = IncomingMessage(channel="telegram", chat_id="-100", user_id="7", text="/export", is_group=True,
                         message_id="-100:55", extra={"thread_id": 9})
    assert channel.max_file_bytes == 50_000_000
    await channel.send_file(to, path, filename="export-telegram_group.zip", caption="Export: 3 stored messages.")
    [doc] = api.documents
    assert (doc["chat_id"], doc["file_name"], doc["data"]) == (-100, "export-telegram_group.zip", path.read_bytes())
    assert doc["caption"] == "Export: 3 stored messages." and doc["params"]["message_thread_id"] == 9
    assert doc["params"]["reply_parameters"] == {"message_id": 55, "allow_sending_without_reply": True}
    api.fail_next("sendDocument", 413, "Request Entity Too Large")
    with pytest.raises(TelegramError):
        await channel.send_file(to, path, filename="again.zip")
