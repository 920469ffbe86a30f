"""Tests of channels/wechat.py, offline: a real itchat core with filled storage and raw message dicts.

Raw messages go through itchat's own ``produce_msg`` (as its receiving loop does) into ``core.msgList``, from
where the channel's thread pulls them with ``configured_reply()``. Login never reaches the internet: each
core gets a fake ``auto_login`` (and ``send``) on the instance.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path
from typing import Any

import itchat
import pytest
from itchat.components.contact import update_local_chatrooms, update_local_friends
from itchat.components.messages import produce_msg
from itchat.returnvalues import ReturnValue

from channels.base import IncomingMessage
from channels.wechat import QR_FILE, STATUS_FILE, WeChatChannel, WeChatSendError
from config import Config

AT = "\u2005"
BOT_NICK = "Botty"
BOT_IN_GROUP = "Helper"  # the bot's DisplayName in the group
ROOM_TITLE = "Book Club"


class Login:
    """The per-login UserNames of one itchat session (they change at every login)."""

    def __init__(self, seed: str) -> None:
        self.bot = "@" + seed * 8 + "01"
        self.alice = "@" + seed * 8 + "a1"
        self.bob = "@" + seed * 8 + "b2"
        self.room = "@@" + seed * 16 + "c3"


class SendRecorder:
    """A fake for ``core.send``: records (text, toUserName) and answers like WeChat's success."""

    def __init__(self, ret: int = 0) -> None:
        self.calls: list[tuple[str, str]] = []
        self.ret = ret
        self.threads: list[str] = []

    def __call__(self, msg: str, toUserName: str | None = None, mediaId: Any = None) -> ReturnValue:  # noqa: N803
        self.calls.append((msg, toUserName or ""))
        self.threads.append(threading.current_thread().name)
        return ReturnValue({"BaseResponse": {"Ret": self.ret, "ErrMsg": "" if self.ret == 0 else "refused"}})


def make_core(login: Login) -> Any:
    """A real itchat core with a logged-in account, two friends and one group in its storage."""
    core = itchat.new_instance()
    core.loginInfo["url"] = "https://wx.invalid/cgi-bin/mmwebwx-bin"  # only formatted into URLs, never fetched
    core.loginInfo["wxuin"] = "1"
    core.storageClass.userName = login.bot
    core.storageClass.nickName = BOT_NICK
    core.memberList.append({"UserName": login.bot, "NickName": BOT_NICK, "RemarkName": "", "VerifyFlag": 0})
    update_local_friends(core, [
        {"UserName": login.alice, "NickName": "Alice Wang", "RemarkName": "Alice", "VerifyFlag": 0},
        {"UserName": login.bob, "NickName": "Bob", "RemarkName": "", "VerifyFlag": 0},
    ])
    update_local_chatrooms(core, [{
        "UserName": login.room, "NickName": ROOM_TITLE, "MemberList": [
            {"UserName": login.bot, "NickName": BOT_NICK, "DisplayName": BOT_IN_GROUP},
            {"UserName": login.alice, "NickName": "Alice Wang", "DisplayName": "Ali"},
            {"UserName": login.bob, "NickName": "Bob", "DisplayName": ""},
        ],
    }])
    core.send = SendRecorder()
    return core


def logs_in(core: Any) -> None:
    """Replace auto_login with one that succeeds at once, as a hot reload would."""
    def auto_login(**kwargs: Any) -> None:
        core.alive = True
        kwargs["loginCallback"]()
    core.auto_login = auto_login


_next_id = [7000000000000000000]


def raw(frm: str, to: str, content: str, *, msg_type: int = 1, age: float = 0, msg_id: str | None = None
        ) -> dict[str, Any]:
    """A raw message dict as webwxsync returns it in AddMsgList."""
    if msg_id is None:
        _next_id[0] += 1
        msg_id = str(_next_id[0])
    return {"MsgId": msg_id, "NewMsgId": int(msg_id), "FromUserName": frm, "ToUserName": to, "MsgType": msg_type,
            "Content": content, "CreateTime": int(time.time() - age), "Url": "", "AppMsgType": 0,
            "Status": 3, "FileName": "", "MediaId": ""}


def feed(core: Any, *messages: dict[str, Any]) -> None:
    """Hand raw messages to itchat as its receiving loop does."""
    for msg in produce_msg(core, list(messages)):
        core.msgList.put(msg)


class Harness:
    """A started channel on a fake-logged-in core, with an inbox of delivered messages."""

    def __init__(self, core: Any, config: Config) -> None:
        self.core = core
        self.channel = WeChatChannel(config, core=core)
        self.inbox: asyncio.Queue[IncomingMessage] = asyncio.Queue()
        self.channel.set_handler(self.inbox.put)

    async def next(self) -> IncomingMessage:
        return await asyncio.wait_for(self.inbox.get(), 2)


@pytest.fixture
def cfg(tmp_path: Path) -> Config:
    return Config(data_dir=str(tmp_path))


@pytest.fixture
async def h1(cfg: Config):
    login = Login("1")
    core = make_core(login)
    logs_in(core)
    harness = Harness(core, cfg)
    harness.login = login  # type: ignore[attr-defined]
    await harness.channel.start()
    yield harness
    await harness.channel.stop()


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


# --- login and lifecycle -------------------------------------------------------------------------
async def until_logged_in(channel: WeChatChannel) -> None:
    """Wait until the itchat thread has logged in and is receiving."""
    for _ in range(200):
        if channel.logged_in:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not logged in")


async def thread_ended(channel: WeChatChannel) -> None:
    """Wait until the itchat thread has ended by itself (before stop() could end it)."""
    thread = channel._thread
    assert thread is not None
    await asyncio.to_thread(thread.join, 2)
    assert not thread.is_alive()


def channel_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "channels.wechat" and r.levelno >= logging.ERROR]


async def test_login_sys_exit_is_one_error_line(cfg: Config, caplog: pytest.LogCaptureFixture) -> None:
    core = make_core(Login("7"))

    def auto_login(**kwargs: Any) -> None:
        raise SystemExit  # what itchat does when it cannot reach WeChat

    core.auto_login = auto_login
    channel = WeChatChannel(cfg, core=core)
    await channel.start()
    await thread_ended(channel)
    await asyncio.sleep(0)  # the failure is reported to the loop
    assert channel.failed.is_set()  # the app exits when no other channel can run
    assert channel.failure == "login failed: cannot reach the WeChat servers (itchat gave up)"
    await channel.stop()
    await channel.stop()  # idempotent
    errors = channel_errors(caplog)
    assert len(errors) == 1
    assert errors[0].startswith("wechat: login failed: cannot reach the WeChat servers")
    assert errors[0].endswith("the wechat channel is off; other channels keep running")


async def test_login_against_unreachable_server_is_one_error_line(
        cfg: Config, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real auto_login, pointed at a closed local port: itchat's test_connect fails and calls sys.exit()."""
    monkeypatch.setattr(itchat.config, "BASE_URL", "http://127.0.0.1:9")
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    channel = WeChatChannel(cfg, core=make_core(Login("8")))
    await channel.start()
    await channel.stop()
    assert channel_errors(caplog) == [
        "wechat: login failed: cannot reach the WeChat servers (itchat gave up); "
        "the wechat channel is off; other channels keep running"]


async def test_refused_web_login_is_one_error_line(cfg: Config, caplog: pytest.LogCaptureFixture) -> None:
    core = make_core(Login("9"))
    core.auto_login = lambda **kwargs: None  # itchat's login() returns without logging in when WeChat refuses
    channel = WeChatChannel(cfg, core=core)
    await channel.start()
    await thread_ended(channel)
    await asyncio.sleep(0)
    assert channel.failure is not None and channel.failure.startswith("login failed: WeChat refused the web login")
    await channel.stop()
    errors = channel_errors(caplog)
    assert len(errors) == 1 and errors[0].startswith("wechat: login failed: WeChat refused the web login")


async def test_login_crash_is_one_error_line(cfg: Config, caplog: pytest.LogCaptureFixture) -> None:
    core = make_core(Login("a"))

    def auto_login(**kwargs: Any) -> None:
        raise ConnectionError("network is unreachable")

    core.auto_login = auto_login
    channel = WeChatChannel(cfg, core=core)
    await channel.start()
    await channel.stop()
    assert channel_errors(caplog) == [
        "wechat: stopped by ConnectionError: network is unreachable; "
        "the wechat channel is off; other channels keep running"]


async def test_qr_login_saves_png_shows_qr_and_stop_aborts(
        cfg: Config, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    """start() returns while the QR login waits; stop() ends the wait; nothing is logged as an error."""
    core = make_core(Login("b"))
    waiting = threading.Event()
    seen: dict[str, Any] = {}

    def auto_login(**kwargs: Any) -> None:
        seen.update(kwargs)
        kwargs["qrCallback"](uuid="QRUUID", status="0", qrcode=b"\x89PNG fake")
        waiting.set()
        while True:  # itchat polls check_login and calls qrCallback with each status
            kwargs["qrCallback"](uuid="QRUUID", status="408", qrcode=b"\x89PNG fake")
            time.sleep(0.01)

    core.auto_login = auto_login
    channel = WeChatChannel(cfg, core=core)
    started = time.monotonic()
    await channel.start()
    assert time.monotonic() - started < 0.5
    assert await asyncio.to_thread(waiting.wait, 2)
    data = Path(cfg.data_dir)
    assert (data / QR_FILE).read_bytes() == b"\x89PNG fake"
    assert seen["hotReload"] is True and seen["statusStorageDir"] == str(data / STATUS_FILE)
    assert seen["picDir"] == str(data / QR_FILE) and seen["enableCmdQR"] == 2
    await channel.stop()
    out = capsys.readouterr()
    assert "█" in out.out + out.err  # the QR code was drawn on the terminal
    assert channel_errors(caplog) == []
    assert any("https://login.weixin.qq.com/l/QRUUID" in r.getMessage() for r in caplog.records)


async def test_stop_keeps_login_for_hot_reload(h1: Harness) -> None:
    login = h1.login  # type: ignore[attr-defined]
    feed(h1.core, raw(login.alice, login.bot, "hi"))
    await h1.next()
    await h1.channel.stop()
    assert h1.core.alive is False and not h1.channel.logged_in
    assert len(await asyncio.to_thread(h1.channel.status_path.read_bytes)) > 0
    await h1.channel.stop()  # idempotent


async def test_stop_without_hot_reload_logs_out(tmp_path: Path) -> None:
    core = make_core(Login("c"))
    logs_in(core)
    logouts = []

    def logout() -> None:
        logouts.append(core.alive)
        core.alive = False

    core.logout = logout
    channel = WeChatChannel(Config(data_dir=str(tmp_path), wechat_hot_reload=False), core=core)
    await channel.start()
    await until_logged_in(channel)
    started = time.monotonic()
    await channel.stop()
    assert time.monotonic() - started < 1.0  # the wake-up message ends configured_reply's 1 s wait
    assert logouts == [True]
    assert not (tmp_path / STATUS_FILE).exists()


async def test_logged_out_from_phone_is_one_error_line(cfg: Config, caplog: pytest.LogCaptureFixture) -> None:
    core = make_core(Login("d"))
    logs_in(core)
    channel = WeChatChannel(cfg, core=core)
    await channel.start()
    await until_logged_in(channel)
    core.alive = False  # itchat's receiving loop ends like this, then calls exitCallback
    channel._wake()
    await thread_ended(channel)
    await channel.stop()
    errors = channel_errors(caplog)
    assert len(errors) == 1 and errors[0].startswith("wechat: logged out")


def offline_login_steps(core: Any, monkeypatch: pytest.MonkeyPatch, statuses: list[str]) -> list[str]:
    """Run itchat's real auto_login/login offline: only its network steps are swapped on the instance."""
    monkeypatch.setattr("itchat.components.register.test_connect", lambda retryTime=5: True)
    checks: list[str] = []

    def get_qr_uuid() -> str:
        core.uuid = "REALUUID"
        return core.uuid

    def check_login(uuid: str | None = None) -> str:
        status = statuses.pop(0) if statuses else "408"
        checks.append(status)
        if status == "400":
            core.isLogging = False  # what process_login_info does when the account may not use web WeChat
        time.sleep(0.01)
        return status

    core.get_QRuuid = get_qr_uuid
    core.check_login = check_login
    return checks


async def test_real_itchat_login_draws_qr_and_stop_aborts_it(
        cfg: Config, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.INFO, logger="channels.wechat")
    core = make_core(Login("e"))
    core.storageClass.userName = None  # not logged in yet
    checks = offline_login_steps(core, monkeypatch, ["408", "201", "408"])
    channel = WeChatChannel(cfg, core=core)
    await channel.start()
    qr = channel.qr_path
    for _ in range(200):
        if len(checks) >= 3:
            break
        await asyncio.sleep(0.01)
    png = await asyncio.to_thread(qr.read_bytes)
    assert png.startswith(b"\x89PNG")  # itchat's own QR image, saved in data_dir
    await channel.stop()
    out = capsys.readouterr()
    assert "▀" in out.out + out.err
    messages = [r.getMessage() for r in caplog.records if r.name == "channels.wechat"]
    assert any("https://login.weixin.qq.com/l/REALUUID" in m and str(qr) in m for m in messages)
    assert "wechat: QR code scanned; confirm the login on the phone" in messages
    assert "wechat: login stopped" in messages
    assert channel_errors(caplog) == []
    assert channel.failure is None and not channel.failed.is_set()  # stopped, not failed


async def test_real_itchat_login_refused_is_one_error_line(
        cfg: Config, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    core = make_core(Login("f"))
    offline_login_steps(core, monkeypatch, ["201", "400"])
    channel = WeChatChannel(cfg, core=core)
    await channel.start()
    await thread_ended(channel)
    await channel.stop()
    errors = channel_errors(caplog)
    assert len(errors) == 1 and errors[0].startswith("wechat: login failed: WeChat refused the web login")
    assert core.alive is False


async def test_stop_does_not_wait_forever_for_a_stuck_login(
        cfg: Config, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("channels.wechat.JOIN_TIMEOUT_S", 0.1)
    core = make_core(Login("0"))
    release = threading.Event()
    core.auto_login = lambda **kwargs: release.wait(5)  # a request to WeChat that hangs
    channel = WeChatChannel(cfg, core=core)
    await channel.start()
    thread = channel._thread
    started = time.monotonic()
    await channel.stop()
    assert time.monotonic() - started < 1.0
    assert any(r.levelno == logging.WARNING and "did not end within" in r.getMessage() for r in caplog.records)
    assert channel_errors(caplog) == []
    release.set()
    assert thread is not None
    await asyncio.to_thread(thread.join, 2)
    assert not thread.is_alive()
