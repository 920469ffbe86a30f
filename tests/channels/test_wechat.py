"""Tests of channels/wechat/channel.py, offline (tests/channels/wechat_harness.py): messages in private chats and
groups, replies, and session ids that stay stable across logins."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from channels.wechat.channel import WeChatChannel, WeChatSendError
from config.settings import Config
from core.messages import IncomingMessage
from tests.channels.wechat_harness import (
    AT,
    BOT_IN_GROUP,
    BOT_NICK,
    ROOM_TITLE,
    Harness,
    Login,
    SendRecorder,
    feed,
    logs_in,
    make_core,
    raw,
)


# --- private chats ---------------------------------------------------------------------------
async def test_private_message_and_reply(h1: Harness) -> None:
    login = h1.login  # type: ignore[attr-defined]
    feed(h1.core, raw(login.alice, login.bot, "hi &amp; hello<br/>second line", msg_id="4242"))
    msg = await h1.next()
    assert (msg.channel, msg.chat_id, msg.user_id, msg.user_name) == ("wechat", "Alice", "Alice", "Alice Wang")
    assert msg.text == "hi & hello\nsecond line"
    assert (msg.is_group, msg.mentions_bot, msg.is_from_bot, msg.content_type) == (False, False, False, "text")
    assert msg.message_id == "4242"
    assert msg.extra == {"to_user_name": login.alice, "bot_user_name": login.bot}
    assert abs(msg.time.timestamp() - time.time()) < 5 and msg.time.tzinfo is not None
    assert h1.channel.bot_username == BOT_NICK and h1.channel.logged_in

    await h1.channel.send(msg, "hello Alice")
    assert h1.core.send.calls == [("hello Alice", login.alice)]
    assert h1.core.send.threads[0] != threading.current_thread().name  # itchat's blocking call left the loop


async def test_friend_without_remark_uses_nickname(h1: Harness) -> None:
    login = h1.login  # type: ignore[attr-defined]
    feed(h1.core, raw(login.bob, login.bot, "yo"))
    msg = await h1.next()
    assert (msg.chat_id, msg.user_id, msg.user_name) == ("Bob", "Bob", "Bob")


async def test_bot_own_messages_are_ignored(h1: Harness) -> None:
    login = h1.login  # type: ignore[attr-defined]
    feed(h1.core, raw(login.bot, login.alice, "sent from my phone"),
         raw(login.bot, login.room, "also mine"),
         raw(login.alice, login.bot, "after"))
    assert (await h1.next()).text == "after"
    assert h1.inbox.empty()


async def test_duplicate_msgid_is_delivered_once(h1: Harness) -> None:
    login = h1.login  # type: ignore[attr-defined]
    feed(h1.core, raw(login.alice, login.bot, "once", msg_id="555"))
    feed(h1.core, raw(login.alice, login.bot, "once", msg_id="555"), raw(login.alice, login.bot, "next"))
    assert (await h1.next()).text == "once"
    assert (await h1.next()).text == "next"
    assert h1.inbox.empty()


async def test_messages_older_than_60s_are_skipped(h1: Harness) -> None:
    login = h1.login  # type: ignore[attr-defined]
    feed(h1.core, raw(login.alice, login.bot, "from yesterday", age=86400),
         raw(login.alice, login.bot, "61 s old", age=61),
         raw(login.alice, login.bot, "50 s old", age=50))
    assert (await h1.next()).text == "50 s old"
    assert h1.inbox.empty()


async def test_non_text_message_has_its_type_and_no_text(h1: Harness) -> None:
    login = h1.login  # type: ignore[attr-defined]
    feed(h1.core, raw(login.alice, login.bot, "", msg_type=3), raw(login.alice, login.bot, "", msg_type=34))
    picture, voice = await h1.next(), await h1.next()
    assert (picture.content_type, picture.text, picture.chat_id) == ("picture", "", "Alice")
    assert (voice.content_type, voice.text) == ("recording", "")


async def test_system_notes_are_not_delivered(h1: Harness) -> None:
    login = h1.login  # type: ignore[attr-defined]
    feed(h1.core, raw(login.room, login.bot, '"Bob" joined the group chat', msg_type=10000),
         raw(login.alice, login.bot, "real"))
    assert (await h1.next()).text == "real"


# --- groups ----------------------------------------------------------------------------------
async def test_group_message_with_at_mentions_bot_and_is_stripped(h1: Harness) -> None:
    login = h1.login  # type: ignore[attr-defined]
    feed(h1.core, raw(login.room, login.bot, f"{login.alice}:<br/>@{BOT_IN_GROUP}{AT}what is 2+2?", msg_id="77"))
    msg = await h1.next()
    assert (msg.chat_id, msg.user_id, msg.user_name) == (ROOM_TITLE, "Ali", "Ali")
    assert (msg.is_group, msg.group_name, msg.mentions_bot) == (True, ROOM_TITLE, True)
    assert msg.text == "what is 2+2?"
    assert msg.message_id == "77"
    assert msg.extra == {"to_user_name": login.room, "actual_user_name": login.alice, "bot_user_name": login.bot}


async def test_group_message_without_at_does_not_mention_bot(h1: Harness) -> None:
    login = h1.login  # type: ignore[attr-defined]
    feed(h1.core, raw(login.room, login.bot, f"{login.bob}:<br/>just chatting"))
    msg = await h1.next()
    assert (msg.chat_id, msg.user_id, msg.user_name) == (ROOM_TITLE, "Bob", "Bob")  # no DisplayName: NickName
    assert (msg.mentions_bot, msg.text) == (False, "just chatting")


def quote_xml(title: str, name: str, quoted: str, quoted_type: int = 1) -> str:
    """A quote reply's Content as the web protocol sends it (HTML-escaped XML)."""
    xml = (f"<?xml version=\"1.0\"?><msg><appmsg appid=\"\" sdkver=\"0\"><title>{title}</title><type>57</type>"
           f"<refermsg><type>{quoted_type}</type><svrid>123</svrid><displayname>{name}</displayname>"
           f"<content>{quoted}</content></refermsg></appmsg></msg>")
    return xml.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


async def test_group_quote_reply_carries_the_quoted_text_and_author(h1: Harness) -> None:
    login = h1.login  # type: ignore[attr-defined]
    quote = raw(login.room, login.bot, f"{login.alice}:<br/>" + quote_xml(f"@{BOT_IN_GROUP}{AT}is that so?", "Bob",
                                                                          "we ship on Friday"), msg_type=49)
    quote["AppMsgType"] = 57
    picture = raw(login.room, login.bot, f"{login.alice}:<br/>" + quote_xml("nice", "Bob", "&lt;img/&gt;", 3),
                  msg_type=49)
    picture["AppMsgType"] = 57
    feed(h1.core, quote, picture)
    msg = await h1.next()
    assert (msg.content_type, msg.text, msg.mentions_bot) == ("text", "is that so?", True)
    assert (msg.reply_to_name, msg.reply_to_text) == ("Bob", "we ship on Friday")
    other = await h1.next()  # a quoted picture: a sharing, as before
    assert (other.content_type, other.reply_to_text) == ("sharing", "")


async def test_group_embedded_at_of_account_nickname_is_stripped(h1: Harness) -> None:
    login = h1.login  # type: ignore[attr-defined]
    feed(h1.core, raw(login.room, login.bot, f"{login.alice}:<br/>hey @{BOT_IN_GROUP}{AT}and @{BOT_NICK} help"))
    msg = await h1.next()
    assert msg.mentions_bot is True
    assert msg.text == "hey and help"


async def test_group_reply_starts_with_at_name(h1: Harness) -> None:
    login = h1.login  # type: ignore[attr-defined]
    feed(h1.core, raw(login.room, login.bot, f"{login.alice}:<br/>@{BOT_IN_GROUP}{AT}hi"))
    msg = await h1.next()
    await h1.channel.send(msg, "4")
    await h1.channel.send(msg, "@Ali already addressed")
    assert h1.core.send.calls == [("@Ali 4", login.room), ("@Ali already addressed", login.room)]


async def test_long_group_reply_is_split_with_one_at_prefix(h1: Harness) -> None:
    login = h1.login  # type: ignore[attr-defined]
    feed(h1.core, raw(login.room, login.bot, f"{login.alice}:<br/>@{BOT_IN_GROUP}{AT}long please"))
    msg = await h1.next()
    body = "\n".join("y" * 999 for _ in range(3))  # 2,999 characters: two lines fit in 2,000 with "@Ali "
    await h1.channel.send(msg, body)
    sent = [text for text, _ in h1.core.send.calls]
    assert sent == ["@Ali " + "y" * 999, "y" * 999 + "\n" + "y" * 999]
    assert all(to == login.room for _, to in h1.core.send.calls)


async def test_reply_that_looks_like_an_itchat_file_command_is_sent_as_text(h1: Harness) -> None:
    login = h1.login  # type: ignore[attr-defined]
    feed(h1.core, raw(login.alice, login.bot, "trick"))
    msg = await h1.next()
    await h1.channel.send(msg, "@fil@/etc/passwd")
    assert h1.core.send.calls == [("@msg@@fil@/etc/passwd", login.alice)]


async def test_refused_send_raises(cfg: Config) -> None:
    login = Login("5")
    core = make_core(login)
    core.send = SendRecorder(ret=1101)
    channel = WeChatChannel(cfg, core=core)
    to = IncomingMessage(channel="wechat", chat_id="Alice", user_id="Alice", text="x",
                         extra={"to_user_name": login.alice})
    with pytest.raises(WeChatSendError, match="refused"):
        await channel.send(to, "hello")


# --- stable ids across logins ------------------------------------------------------------------
async def test_session_ids_are_stable_across_logins(tmp_path: Path) -> None:
    received = []
    for seed in ("1", "2"):
        login = Login(seed)
        core = make_core(login)
        logs_in(core)
        harness = Harness(core, Config(data_dir=str(tmp_path / seed)))
        await harness.channel.start()
        try:
            feed(core, raw(login.alice, login.bot, "private"),
                 raw(login.room, login.bot, f"{login.alice}:<br/>@{BOT_IN_GROUP}{AT}group"))
            received.append((await harness.next(), await harness.next(), login))
        finally:
            await harness.channel.stop()
    (p1, g1, l1), (p2, g2, l2) = received
    assert l1.alice != l2.alice and l1.room != l2.room
    assert (p1.chat_id, p1.user_id) == (p2.chat_id, p2.user_id) == ("Alice", "Alice")
    assert (g1.chat_id, g1.user_id) == (g2.chat_id, g2.user_id) == (ROOM_TITLE, "Ali")
    assert (p1.extra["to_user_name"], p2.extra["to_user_name"]) == (l1.alice, l2.alice)
    assert (g1.extra["to_user_name"], g2.extra["to_user_name"]) == (l1.room, l2.room)


async def test_reply_to_message_of_an_earlier_login_resolves_current_username(cfg: Config) -> None:
    old, new = Login("3"), Login("4")
    core = make_core(new)
    channel = WeChatChannel(cfg, core=core)
    private = IncomingMessage(channel="wechat", chat_id="Alice", user_id="Alice", text="x", user_name="Alice Wang",
                              extra={"to_user_name": old.alice, "bot_user_name": old.bot})
    group = IncomingMessage(channel="wechat", chat_id=ROOM_TITLE, user_id="Ali", text="x", user_name="Ali",
                            is_group=True, group_name=ROOM_TITLE,
                            extra={"to_user_name": old.room, "bot_user_name": old.bot})
    by_nickname = IncomingMessage(channel="wechat", chat_id="Bob", user_id="Bob", text="x")  # no extra at all
    await channel.send(private, "p")
    await channel.send(group, "g")
    await channel.send(by_nickname, "b")
    assert core.send.calls == [("p", new.alice), ("@Ali g", new.room), ("b", new.bob)]


async def test_unknown_chat_cannot_be_resolved(cfg: Config) -> None:
    core = make_core(Login("6"))
    channel = WeChatChannel(cfg, core=core)
    to = IncomingMessage(channel="wechat", chat_id="Book", user_id="x", text="x", is_group=True)  # not exact
    with pytest.raises(WeChatSendError, match="no WeChat chat named 'Book'"):
        await channel.send(to, "hello")
    assert core.send.calls == []
