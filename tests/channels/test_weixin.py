"""The weixin channel against the fake iLink server (tests/fakes/ilink_server.py): login, long poll, replies."""

from __future__ import annotations

import asyncio
import json
import logging
import stat
from pathlib import Path

import pytest

from channels.weixin import channel as weixin_channel
from channels.weixin.channel import WeixinChannel
from channels.weixin.incoming import to_incoming
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


async def test_a_failed_later_piece_is_sent_again_alone(api, tmp_path):
    """Issue 40: a 5xx on the second piece resent the first one with the whole answer."""
    from channels.weixin.client import ILinkHTTPError

    bot = await logged_in(api, tmp_path)
    try:
        api.push_text(USER, "long please")
        await until(lambda: len(bot.received) == 1)
        answer = "\n\n".join(f"part {i} " + "x" * 2990 for i in range(3))  # three pieces
        api.fail_sendmessage = {api.sendmessage_calls + 2}  # the second piece's first try: 502
        with pytest.raises(ILinkHTTPError):
            await bot.channel.send(bot.received[0], answer)
        await bot.channel.send(bot.received[0], answer)  # the outbox's retry
        sent = api.sent_to(USER)[1:]
        assert [s[:6] for s in sent] == ["part 0", "part 1", "part 2"]
        assert "\n\n".join(sent) == answer
        await bot.channel.send(bot.received[0], answer)  # the same answer again later: sent whole again
        assert len(api.sent_to(USER)) == 7
    finally:
        await bot.channel.stop()


async def test_prepare_failed_on_a_long_piece_makes_the_pieces_shorter(api, tmp_path, caplog):
    bot = await logged_in(api, tmp_path)
    try:
        api.max_text = 1500  # this server takes less than the plugin's 4,000
        api.push_text(USER, "long please")
        await until(lambda: len(bot.received) == 1)
        answer = " ".join(f"w{i:04d}" for i in range(700))  # 4,199 characters
        await bot.channel.send(bot.received[0], answer)
        sent = api.sent_to(USER)[1:]
        assert all(len(s) <= 1500 for s in sent) and " ".join(sent) == answer
        assert [why for *_, why in api.refused] == ["too long", "too long"]  # 4,000, then 2,000, then 1,000s
        refused = len(api.refused)
        await bot.channel.send(bot.received[0], "y" * 1800)  # later replies use the length that went through
        assert len(api.refused) == refused and api.sent_to(USER)[-2:] == ["y" * 1000, "y" * 800]
    finally:
        await bot.channel.stop()
    assert caplog.text.count("WeChat takes pieces of 1000 characters") == 1


async def test_a_reply_uses_the_users_newest_context_token(api, tmp_path):
    bot = await logged_in(api, tmp_path)
    try:
        api.push_text(USER, "first")
        api.push_text(USER, "second")
        await until(lambda: len(bot.received) == 2)
        newest = bot.received[1].extra["context_token"]
        await bot.channel.send(bot.received[0], "late answer to the first")
        assert api.sent[-1].context_token == newest
        await until(lambda: json.loads((tmp_path / "weixin_cursor.json").read_text())
                    .get("context_tokens", {}).get(USER, {}).get("token") == newest)
        # another process (a follower) sends with the newest token too, read from data_dir
        other = Bot(api, tmp_path)
        await other.channel.start(intake=False)
        try:
            await other.channel.send(bot.received[0], "from the other process")
            assert api.sent[-1].context_token == newest
        finally:
            await other.channel.stop()
    finally:
        await bot.channel.stop()


async def test_a_reminder_refused_for_its_token_waits_for_the_users_next_message(api, tmp_path, caplog):
    bot = await logged_in(api, tmp_path)
    try:
        api.push_text(USER, "remind me")
        await until(lambda: api.sent_to(USER) == ["echo: remind me"])
        api.age_tokens(25 * 3600)  # a day passes without the user writing
        reminder = IncomingMessage(channel="weixin", chat_id=USER, user_id=USER, text="", content_type="reminder",
                                   message_id="reminder-1-1", extra=dict(bot.received[0].extra))
        await bot.channel.send(reminder, "⏰ Reminder: stretch")  # refused: kept, not raised (no outbox retry)
        assert api.sent_to(USER) == ["echo: remind me"] and len(api.refused) == 1
        await asyncio.sleep(0.3)
        assert len(api.refused) == 1, "not retried in a loop"
        api.push_text(USER, "back")
        await until(lambda: len(api.sent_to(USER)) == 3)
        assert sorted(api.sent_to(USER)[1:]) == ["echo: back", "⏰ Reminder: stretch"]
        assert not list((tmp_path / "weixin_held").rglob("*.json"))
    finally:
        await bot.channel.stop()
    kept = [r for r in caplog.records if "it is kept and sent when they next write" in r.getMessage()]
    assert len(kept) == 1 and kept[0].levelname == "WARNING"


async def test_notifystart_when_receiving_starts_and_notifystop_when_it_stops(api, tmp_path):
    bot = await logged_in(api, tmp_path)
    await until(lambda: api.notified == ["notifystart"])
    await bot.channel.stop()
    assert api.notified == ["notifystart", "notifystop"]
    assert api.violations == []


async def test_the_qr_code_is_asked_for_by_post_with_the_kept_token_and_by_get_from_an_older_server(api, tmp_path):
    bot = await logged_in(api, tmp_path)
    token = api.tokens[0]
    try:
        api.end_session()  # a new login follows: WeChat is told the token kept here
        await asyncio.to_thread(api.wait_for_qr, 2)
    finally:
        await bot.channel.stop()
    assert api.qr_requests == [("POST", []), ("POST", [token])]
    api.post_qrcode = False
    (tmp_path / "weixin_account.json").unlink(missing_ok=True)
    older = Bot(api, tmp_path)
    await older.channel.start()
    try:
        await asyncio.to_thread(api.wait_for_qr, 3)
    finally:
        await older.channel.stop()
    assert api.qr_requests[-1] == ("GET", None)
    assert api.violations == []


async def test_need_verifycode_asks_for_the_number_and_sends_it_back_until_it_is_right(api, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    bot = Bot(api, tmp_path)
    await bot.channel.start()
    try:
        await asyncio.to_thread(api.wait_for_qr, 1)
        api.set_qr("need_verifycode", verify="482913")
        await until(lambda: bot.channel.wants_verify_code)
        assert bot.channel.login_state is LoginState.NEED_CODE
        assert bot.channel.enter_verify_code("111111")  # a wrong number: asked again
        await until(lambda: bot.channel.wants_verify_code and api.codes[0].codes_given == ["111111"])
        assert bot.channel.enter_verify_code(" 482913 ")
        await until(lambda: api.codes[0].reported == "scaned")
        assert not bot.channel.wants_verify_code and not bot.channel.enter_verify_code("482913")
        api.set_qr("confirmed")
        await until(lambda: bot.channel.login_state is LoginState.CONFIRMED)
    finally:
        await bot.channel.stop()
    assert api.codes[0].codes_given == ["111111", "482913"]
    asked = [r.getMessage() for r in caplog.records if "WeChat shows a number" in r.getMessage()
             or "the number did not match" in r.getMessage()]
    assert len(asked) == 2 and "did not match" in asked[1]
    assert "the number was right" in caplog.text


async def test_verify_code_blocked_says_so_stops_asking_and_shows_a_fresh_code(api, tmp_path, caplog):
    bot = Bot(api, tmp_path)
    await bot.channel.start()
    try:
        await asyncio.to_thread(api.wait_for_qr, 1)
        api.set_qr("need_verifycode")
        for wrong in ("1", "2", "3"):
            await until(lambda: bot.channel.wants_verify_code)
            assert bot.channel.enter_verify_code(wrong)
            await until(lambda: not bot.channel.wants_verify_code)
        await asyncio.to_thread(api.wait_for_qr, 2)
        await asyncio.sleep(0.2)
        assert not bot.channel.wants_verify_code  # no more asking
        await asyncio.to_thread(api.confirm_qr)
        await until(lambda: bot.channel.login_state is LoginState.CONFIRMED)
    finally:
        await bot.channel.stop()
    blocked = [r for r in caplog.records if "blocked this login after too many wrong numbers" in r.getMessage()]
    assert len(blocked) == 1 and blocked[0].levelname == "WARNING"


async def test_scaned_but_redirect_polls_the_named_host(api, tmp_path):
    bot = Bot(api, tmp_path)
    await bot.channel.start()
    try:
        await asyncio.to_thread(api.wait_for_qr, 1)
        api.set_qr("scaned_but_redirect")
        await until(lambda: api.idc_port in api.status_ports)
        api.set_qr("confirmed")
        await until(lambda: bot.channel.login_state is LoginState.CONFIRMED)
        at = api.status_ports.index(api.idc_port)
        assert set(api.status_ports[at:]) == {api.idc_port}, "every poll after the redirect went to the other host"
        api.push_text(USER, "hi")
        assert await asyncio.to_thread(api.wait_sent, USER, 1) == ["echo: hi"]
    finally:
        await bot.channel.stop()


async def test_confirmed_without_a_bot_id_is_a_failed_login_and_a_fresh_code(api, tmp_path, caplog):
    bot = Bot(api, tmp_path)
    await bot.channel.start()
    try:
        await asyncio.to_thread(api.wait_for_qr, 1)
        api.set_qr("confirmed", without_bot_id=True)
        await asyncio.to_thread(api.wait_for_qr, 2)
        assert bot.channel.login_state is not LoginState.CONFIRMED
        assert not (tmp_path / "weixin_account.json").exists()
        await asyncio.to_thread(api.confirm_qr)
        await until(lambda: bot.channel.login_state is LoginState.CONFIRMED)
    finally:
        await bot.channel.stop()
    failed = [r for r in caplog.records if "the login failed" in r.getMessage()]
    assert len(failed) == 1 and "without its ilink_bot_id" in failed[0].getMessage()
    assert failed[0].levelname == "ERROR"


async def test_binded_redirect_takes_the_login_kept_here_back(api, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    bot = await logged_in(api, tmp_path)
    token = api.tokens[0]
    try:
        api.end_session()
        await asyncio.to_thread(api.wait_for_qr, 2)
        api.revive(token)  # WeChat: this bot is bound here already, and its token works again
        api.set_qr("binded_redirect")
        await until(lambda: bot.channel.login_state is LoginState.CONFIRMED)
        api.push_text(USER, "still me")
        assert await asyncio.to_thread(api.wait_sent, USER, 1) == ["echo: still me"]
    finally:
        await bot.channel.stop()
    assert len(api.tokens) == 1 and json.loads((tmp_path / "weixin_account.json").read_text())["bot_token"] == token
    assert "connected already" in caplog.text
