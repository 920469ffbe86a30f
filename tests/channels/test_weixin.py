"""The weixin channel against the fake iLink server (tests/fakes/ilink_server.py): login, long poll, replies."""

from __future__ import annotations

import asyncio
import json
import logging
import stat
from pathlib import Path

import pytest

from channels.weixin import channel as weixin_channel
from channels.weixin.channel import WeixinChannel, to_incoming
from channels.weixin.login import LoginState
from config.settings import Config
from core.messages import IncomingMessage
from tests.fakes.ilink_server import FakeILink, decode_cursor

USER = "alice@im.wechat"


class Bot:
    """A weixin channel whose handler records every message and answers ``echo: <text>``."""

    def __init__(self, api: FakeILink, data_dir: Path, base_url: str | None = None) -> None:
        self.channel = WeixinChannel(Config(data_dir=str(data_dir), weixin_base_url=base_url or api.base_url))
        self.received: list[IncomingMessage] = []
        self.channel.set_handler(self._handle)

    async def _handle(self, msg: IncomingMessage) -> bool:
        self.received.append(msg)
        await self.channel.send(msg, "echo: " + msg.text)
        return True


async def until(check, within: float = 10.0) -> None:
    """Wait until ``check()`` is true (it polls: the state it watches changes in the fake's thread)."""
    async with asyncio.timeout(within):
        while not check():  # noqa: ASYNC110
            await asyncio.sleep(0.02)


async def logged_in(api: FakeILink, tmp_path: Path, codes: int = 1) -> Bot:
    bot = Bot(api, tmp_path)
    await bot.channel.start()
    await asyncio.to_thread(api.wait_for_qr, codes)
    await asyncio.to_thread(api.confirm_qr)
    await until(lambda: bot.channel.login_state is LoginState.CONFIRMED)
    return bot


async def test_qr_login_replaces_an_expired_code_and_keeps_the_token_owner_only(api, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    bot = Bot(api, tmp_path)
    await bot.channel.start()
    try:
        first = await asyncio.to_thread(api.wait_for_qr, 1)
        await until(lambda: (tmp_path / "weixin_qr.png").exists())  # the bot has the code and shows it
        assert bot.channel.login_state is LoginState.WAITING
        assert (tmp_path / "weixin_qr.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert stat.S_IMODE((tmp_path / "weixin_qr.png").stat().st_mode) == 0o600
        api.set_qr("expired")
        second = await asyncio.to_thread(api.wait_for_qr, 2)
        assert second.qrcode != first.qrcode
        await until(lambda: bot.channel.login.qr_content == second.content)
        await asyncio.to_thread(api.confirm_qr)
        await until(lambda: bot.channel.login_state is LoginState.CONFIRMED)
        account = tmp_path / "weixin_account.json"
        assert stat.S_IMODE(account.stat().st_mode) == 0o600
        assert json.loads(account.read_text())["bot_token"] == api.tokens[0]
        assert api.tokens[0] not in repr(bot.channel.files.load_account())
        assert not (tmp_path / "weixin_qr.png").exists()
        api.push_text(USER, "hello")
        assert await asyncio.to_thread(api.wait_sent, USER, 1) == ["echo: hello"]
        await until(lambda: (tmp_path / "weixin_cursor.json").exists())
        assert stat.S_IMODE((tmp_path / "weixin_cursor.json").stat().st_mode) == 0o600
    finally:
        await bot.channel.stop()
    assert "the QR code expired; here is a fresh one" in caplog.text
    assert "QR code scanned" in caplog.text
    assert api.tokens[0] not in caplog.text and first.qrcode not in caplog.text
    assert api.violations == []


async def test_a_restart_needs_no_scan_and_goes_on_from_the_saved_cursor(api, tmp_path):
    bot = await logged_in(api, tmp_path)
    api.push_text(USER, "one")
    await asyncio.to_thread(api.wait_sent, USER, 1)
    await until(lambda: (tmp_path / "weixin_cursor.json").exists())
    await bot.channel.stop()
    cursor = json.loads((tmp_path / "weixin_cursor.json").read_text())["get_updates_buf"]
    assert decode_cursor(cursor) == 1
    api.push_text(USER, "two")
    again = Bot(api, tmp_path)
    await again.channel.start()
    try:
        assert await asyncio.to_thread(api.wait_sent, USER, 2) == ["echo: one", "echo: two"]
        assert len(api.codes) == 1, "no new QR code"
        assert [m.text for m in again.received] == ["two"]
    finally:
        await again.channel.stop()


async def test_the_cursor_is_saved_only_once_the_batch_is_journalled(api, tmp_path):
    bot = await logged_in(api, tmp_path)
    journalled = asyncio.Event()

    async def settled() -> None:
        await journalled.wait()

    bot.channel.intake_settled = settled
    try:
        api.push_text(USER, "one")
        await until(lambda: len(bot.received) == 1)
        await asyncio.sleep(0.1)
        assert not (tmp_path / "weixin_cursor.json").exists()
        journalled.set()
        await until(lambda: (tmp_path / "weixin_cursor.json").exists())
    finally:
        await bot.channel.stop()


async def test_session_ended_by_wechat_is_one_line_and_a_new_qr_then_messages_flow(api, tmp_path, caplog):
    bot = await logged_in(api, tmp_path)
    try:
        api.end_session()
        await asyncio.to_thread(api.wait_for_qr, 2)
        assert not (tmp_path / "weixin_account.json").exists()
        await asyncio.to_thread(api.confirm_qr)
        api.push_text(USER, "back")
        assert await asyncio.to_thread(api.wait_sent, USER, 1) == ["echo: back"]
    finally:
        await bot.channel.stop()
    assert caplog.text.count("WeChat ended the session (errcode -14)") == 1
    assert bot.channel.failure is None


async def test_a_long_answer_is_split_at_4000_characters_with_fresh_client_ids(api, tmp_path):
    bot = await logged_in(api, tmp_path)
    try:
        api.push_text(USER, "long please")
        await until(lambda: len(bot.received) == 1)
        paragraph = "word " * 199 + "end.\n\n"  # 1,001 characters
        answer = (paragraph * 10)[:10_000]
        await bot.channel.send(bot.received[0], answer)
        sent = [s for s in api.sent if s.text != "echo: long please"]
        assert [len(s.text) <= 4000 for s in sent] == [True, True, True]
        assert "".join(s.text.replace("\n", "").replace(" ", "") for s in sent) == \
            answer.replace("\n", "").replace(" ", "")
        assert len({s.client_id for s in api.sent}) == len(api.sent)
        assert {s.context_token for s in sent} == {bot.received[0].extra["context_token"]}
    finally:
        await bot.channel.stop()


async def test_typing_uses_the_ticket_and_is_cancelled_by_the_reply(api, tmp_path):
    bot = await logged_in(api, tmp_path)
    try:
        api.push_text(USER, "hi")
        await until(lambda: len(bot.received) == 1)
        await bot.channel.typing(bot.received[0])
        await bot.channel.send(bot.received[0], "done")
        assert api.typing == [(USER, 1), (USER, 2)]
    finally:
        await bot.channel.stop()


async def test_network_errors_back_off_with_one_line_each_way(api, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    bot = await logged_in(api, tmp_path)
    try:
        api.fail_next = 3  # the next three long polls get HTTP 500
        await until(lambda: api.fail_next == 0)
        api.push_text(USER, "through")
        assert await asyncio.to_thread(api.wait_sent, USER, 1) == ["echo: through"]
    finally:
        await bot.channel.stop()
    assert caplog.text.count("does not answer") == 1
    assert caplog.text.count("answers again") == 1


async def test_an_unreachable_api_at_start_is_one_line_and_no_failure(api, tmp_path, caplog):
    bot = Bot(api, tmp_path, base_url="http://127.0.0.1:9")  # the discard port: nothing listens
    await bot.channel.start()
    await asyncio.sleep(0.5)
    await bot.channel.stop()
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and "WeChat's bot API at http://127.0.0.1:9 does not answer" in lines[0].getMessage()
    assert bot.channel.failure is None


async def test_duplicate_deliveries_reach_the_handler_with_one_message_id(api, tmp_path):
    bot = await logged_in(api, tmp_path)
    try:
        mid = api.push_text(USER, "twice", copies=2)
        await until(lambda: len(bot.received) == 2)
        assert {m.message_id for m in bot.received} == {str(mid)}  # the dispatcher answers one message id once
    finally:
        await bot.channel.stop()


def test_to_incoming_text_media_and_own_messages():
    base = {"message_id": 42, "from_user_id": USER, "create_time_ms": 1_700_000_000_000, "message_type": 1,
            "context_token": "ctx"}
    text = to_incoming({**base, "item_list": [{"type": 1, "text_item": {"text": "hi"}}]})
    assert (text.chat_id, text.user_id, text.text, text.message_id, text.content_type) == (USER, USER, "hi", "42",
                                                                                          "text")
    assert text.extra == {"context_token": "ctx"} and text.time.year == 2023 and not text.is_group
    photo = to_incoming({**base, "item_list": [{"type": 2, "image_item": {}}]})
    assert (photo.text, photo.content_type) == ("", "photo")
    assert to_incoming({**base, "item_list": [{"type": 3, "voice_item": {}}]}).content_type == "voice"
    assert to_incoming({**base, "message_type": 2, "item_list": []}) is None
    quote = to_incoming({**base, "message_id": 7_000_000_000_000_000_123, "item_list": [
        {"type": 1, "text_item": {"text": "is that true?"},
         "ref_msg": {"title": "t", "message_item": {"type": 1, "text_item": {"text": "cats can fly"}}}}]})
    assert (quote.text, quote.reply_to_text, quote.message_id) == ("is that true?", "cats can fly",
                                                                   "7000000000000000123")
    assert to_incoming({"item_list": []}) is None
    assert to_incoming({**base, "item_list": []}) is None and to_incoming({**base, "item_list": "x"}) is None


async def test_a_reply_goes_out_right_after_a_restart_and_waits_while_logged_out(api, tmp_path):
    bot = await logged_in(api, tmp_path)
    api.push_text(USER, "hi")
    await until(lambda: len(bot.received) == 1)
    message = bot.received[0]
    await bot.channel.stop()
    # a reply kept in the outbox is sent at the next start, before the poll runs
    again = Bot(api, tmp_path)
    await again.channel.start(intake=False)
    try:
        await again.channel.send(message, "kept reply")
        assert api.sent_to(USER)[-1] == "kept reply"
    finally:
        await again.channel.stop()
    (tmp_path / "weixin_account.json").unlink()
    logged_out = Bot(api, tmp_path)
    await logged_out.channel.start(intake=False)
    try:
        with pytest.raises(weixin_channel.NotLoggedIn) as err:
            await logged_out.channel.send(message, "waits")
        assert logged_out.channel.retry_delay(err.value, 0) == 0.0, "retried until a login"
    finally:
        await logged_out.channel.stop()


def test_retry_delay_retries_what_can_pass_and_not_a_refusal(tmp_path):
    from channels.weixin.client import ILinkError, ILinkHTTPError, SessionExpired

    channel = WeixinChannel(Config(data_dir=str(tmp_path)))
    assert channel.base_url == "https://ilinkai.weixin.qq.com"  # the default setting
    assert channel.retry_delay(ILinkHTTPError("sendmessage", 502), 0) == 0.0
    assert channel.retry_delay(ILinkHTTPError("sendmessage", 400), 0) is None
    assert channel.retry_delay(SessionExpired("sendmessage", -14, -14, ""), 0) == 0.0
    assert channel.retry_delay(ILinkError("sendmessage", -2, 0, "bad context"), 0) is None
    assert channel.retry_delay(TimeoutError(), 0) == 0.0


async def test_a_malformed_message_loses_nothing_after_it(api, tmp_path, caplog):
    bot = await logged_in(api, tmp_path)
    try:
        api.push(USER, [{"type": 99}])  # an item type nobody knows yet
        api.push(USER, "not a list")  # type: ignore[arg-type]
        api.push_text(USER, "still here")
        await until(lambda: len(bot.received) == 2)
        assert [(m.content_type, m.text) for m in bot.received] == [("other", ""), ("text", "still here")]
    finally:
        await bot.channel.stop()


async def test_only_the_process_elected_to_receive_polls(api, tmp_path):
    bot = await logged_in(api, tmp_path)
    await bot.channel.stop()
    follower = Bot(api, tmp_path)
    assert follower.channel.single_receiver
    await follower.channel.start(intake=False)
    try:
        await asyncio.sleep(0.2)  # the stopped leader's last poll may still reach the fake's log
        polls = api.requests.count(("POST", "/ilink/bot/getupdates"))
        api.push_text(USER, "for the leader")
        await asyncio.sleep(0.3)
        assert api.requests.count(("POST", "/ilink/bot/getupdates")) == polls and follower.received == []
        assert await follower.channel.start_intake()
        await until(lambda: [m.text for m in follower.received] == ["for the leader"])
        await follower.channel.stop_intake()
        await asyncio.sleep(0.2)
        polls = api.requests.count(("POST", "/ilink/bot/getupdates"))
        await asyncio.sleep(0.3)
        assert api.requests.count(("POST", "/ilink/bot/getupdates")) == polls
    finally:
        await follower.channel.stop()


async def test_a_bot_left_waiting_for_a_scan_announces_only_the_first_codes_loudly(api, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    bot = Bot(api, tmp_path)
    await bot.channel.start()
    try:
        for n in range(1, 6):
            await asyncio.to_thread(api.wait_for_qr, n)
            api.set_qr("expired")
        await asyncio.to_thread(api.wait_for_qr, 6)
        await until(lambda: bot.channel.login.codes_shown == 6)
    finally:
        await bot.channel.stop()
    levels = [r.levelname for r in caplog.records if "scan the QR code" in r.getMessage()]
    assert levels == ["WARNING"] * 3 + ["INFO"] * 3
