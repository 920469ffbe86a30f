"""The fake Bot API server, driven by the real python-telegram-bot ``Bot``."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from telegram import Bot
from telegram.error import BadRequest, InvalidToken

from tests.fakes.telegram_api import FakeTelegramAPI, decode_params


@pytest.fixture
def api():
    with FakeTelegramAPI() as server:
        yield server


@pytest.fixture
async def bot(api):
    async with Bot(api.token, base_url=api.base_url, base_file_url=api.base_file_url) as client:
        yield client


def test_decode_params_keeps_strings_raw():
    assert decode_params([("chat_id", "12"), ("text", "12"), ("commands", '[{"command": "a"}]')]) == {
        "chat_id": 12, "text": "12", "commands": [{"command": "a"}]}


async def test_get_me_and_wrong_token(api, bot):
    assert (bot.id, bot.username) == (api.bot_id, "fake_test_bot")
    with pytest.raises(InvalidToken):
        async with Bot("1:wrong", base_url=api.base_url):
            pass


def test_unknown_method_and_wrong_token_http():
    with FakeTelegramAPI() as api:
        for path, code, desc in [(f"/bot{api.token}/noSuchMethod", 404, "Not Found"),
                                 ("/bot1:bad/getMe", 401, "Unauthorized")]:
            with pytest.raises(urllib.error.HTTPError) as info:
                urllib.request.urlopen(f"http://127.0.0.1:{api.port}{path}", timeout=5)
            with info.value as resp:
                assert resp.code == code
                assert json.loads(resp.read()) == {"ok": False, "error_code": code, "description": desc}


async def test_long_poll_waits_for_an_update_and_offset_acknowledges(api, bot):
    timer = threading.Timer(0.3, lambda: api.push_text(1, "late", user_id=1))
    timer.start()
    start = time.monotonic()
    updates = await bot.get_updates(timeout=5)
    timer.join()
    assert 0.25 <= time.monotonic() - start < 3
    assert [u.message.text for u in updates] == ["late"]
    again = await bot.get_updates(timeout=0)
    assert [u.update_id for u in again] == [updates[0].update_id]  # not acknowledged yet
    assert await bot.get_updates(offset=updates[0].update_id + 1, timeout=0) == ()
    assert api.pending_updates == 0


async def test_long_poll_timeout_elapses(api, bot):
    start = time.monotonic()
    assert await bot.get_updates(timeout=0.3) == ()
    assert 0.25 <= time.monotonic() - start < 2


async def test_send_message_records_and_validates(api, bot):
    msg = await bot.send_message(5, "<b>hi</b>", parse_mode="HTML")
    assert (msg.chat.id, msg.text, msg.from_user.id) == (5, "hi", api.bot_id)
    with pytest.raises(BadRequest, match="parse entities"):
        await bot.send_message(5, "<b>unclosed", parse_mode="HTML")
    with pytest.raises(BadRequest, match="too long"):
        await bot.send_message(5, "x" * 4097)
    api.reject_html = True
    with pytest.raises(BadRequest, match="parse entities"):
        await bot.send_message(5, "<b>ok</b>", parse_mode="HTML")
    sent = await api.wait_for_sent(1, timeout=1)
    assert [(s["chat_id"], s["text"], s["parse_mode"]) for s in sent] == [(5, "<b>hi</b>", "HTML")]
    assert api.wait_for_sent_sync(1, timeout=1) == sent
    with pytest.raises(TimeoutError):
        await api.wait_for_sent(2, timeout=0.05)


async def test_actions_commands_and_webhook_info(api, bot):
    await bot.send_chat_action(7, "typing")
    await bot.set_my_commands([("help", "Show help")])
    assert api.actions == [{"chat_id": 7, "action": "typing"}]
    assert api.commands == [[{"command": "help", "description": "Show help"}]]
    assert await bot.set_webhook("http://127.0.0.1:9/hook", secret_token="s3cret")
    assert (await bot.get_webhook_info()).url == "http://127.0.0.1:9/hook"
    assert await bot.delete_webhook()
    assert (await bot.get_webhook_info()).url == ""


async def test_send_document_uploads_a_file_as_the_bot_api_does(api, bot):
    message = await bot.send_document(42, document=b"PK\x03\x04zip", filename="export.zip", caption="Your export")
    assert message.document.file_name == "export.zip" and message.document.mime_type == "application/zip"
    assert message.document.file_size == 7 and message.caption == "Your export"
    [sent] = api.documents
    assert (sent["chat_id"], sent["file_name"], sent["data"], sent["caption"]) == (42, "export.zip", b"PK\x03\x04zip",
                                                                                   "Your export")
    with pytest.raises(BadRequest, match="caption is too long"):
        await bot.send_document(42, document=b"x", filename="a.txt", caption="c" * 1025)
    with pytest.raises(BadRequest, match="(?i)wrong file identifier"):
        await bot.send_document(42, document="BQACAgIAAxkDAAI-unknown")
    assert len(api.documents) == 1
