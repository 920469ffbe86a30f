"""Flood limits and fallbacks of the Telegram channel: python-telegram-bot's AIORateLimiter waits out a 429
(no loop of ours), and one helper turns rejected markup into plain text, for sends and for edits alike.

The real python-telegram-bot talks to the fake Bot API server.
"""

from __future__ import annotations

import asyncio

import pytest
from telegram.error import RetryAfter

from channels.telegram.channel import TelegramChannel
from channels.telegram.stream import TelegramReplyStream
from core.messages import IncomingMessage
from core.retry import FLOOD_LIMIT
from tests.channels.test_telegram import make_config
from tests.fakes.telegram_api import FakeTelegramAPI

FLOOD = ("Too Many Requests: retry after 1", {"retry_after": 1})


@pytest.fixture
def api():
    with FakeTelegramAPI() as server:
        yield server


@pytest.fixture(params=[True, False], ids=["paced", "self-hosted"])
async def channel(api, request):
    """The channel with Telegram's pace (the default, ``telegram_rate_limit`` true) and without it."""
    ch = TelegramChannel(make_config(api, telegram_rate_limit=request.param))
    await ch.start(intake=False)
    assert ch.active
    yield ch
    await ch.stop()


def private(chat_id: int = 42) -> IncomingMessage:
    return IncomingMessage(channel="telegram", chat_id=str(chat_id), user_id=str(chat_id), text="hi")


def calls(api: FakeTelegramAPI, method: str) -> list[dict]:
    return [params for name, params in api.calls if name == method]


async def test_a_flood_limit_is_waited_out_and_the_send_retried(api, channel):
    api.fail_next("sendMessage", 429, *FLOOD)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await channel.send(private(), "hello")
    assert [s["text"] for s in api.sent] == ["hello"]
    assert len(calls(api, "sendMessage")) == 2
    assert loop.time() - started >= 1.0  # the wait Telegram asked for was taken


async def test_flood_limits_past_the_policy_reach_the_outbox_with_their_wait(api, channel):
    for _ in range(FLOOD_LIMIT.attempts + 1):
        api.fail_next("sendMessage", 429, *FLOOD)
    with pytest.raises(RetryAfter) as raised:
        await channel.send(private(), "hello")
    assert len(calls(api, "sendMessage")) == FLOOD_LIMIT.attempts  # 3 calls, not 3 x 3
    assert api.sent == []
    assert channel.retry_delay(raised.value, 0) == 1.0  # the outbox waits what Telegram asked


async def test_a_vanished_message_to_answer_is_not_referenced_again(api, channel):
    api.fail_next("sendMessage", 400, "Bad Request: message to reply not found")
    to = IncomingMessage(channel="telegram", chat_id="-100", user_id="7", text="q", is_group=True,
                         message_id="-100:55")
    await channel.send(to, "answer")
    [sent] = api.sent
    assert sent["text"] == "answer" and "reply_parameters" not in sent["params"]
    assert "reply_parameters" in calls(api, "sendMessage")[0]


async def test_rejected_markup_of_a_final_edit_leaves_the_plain_text(api, channel, caplog):
    stream = TelegramReplyStream(channel, private(43))
    await stream.push("**Bold** and more words to pass the first message's hold")
    await api.wait_for(lambda: len(api.sent) == 1)
    api.reject_html = True
    await stream.finish("**Bold** and more words to pass the first message's hold, done")
    html = [p for p in calls(api, "editMessageText") if p.get("parse_mode") == "HTML"]
    assert len(html) == 1  # tried once with HTML, then as plain text
    assert api.chat_texts(43) == ["**Bold** and more words to pass the first message's hold, done"]
    assert "markup rejected" in caplog.text


async def test_a_final_edit_under_a_flood_limit_is_retried_by_the_limiter(api, channel):
    stream = TelegramReplyStream(channel, private(44))
    await stream.push("The first words of an answer, long enough to be sent")
    await api.wait_for(lambda: len(api.sent) == 1)
    api.fail_next("editMessageText", 429, *FLOOD)
    await stream.finish("The first words of an answer, long enough to be sent. **Done.**")
    assert api.chat_texts(44) == ["The first words of an answer, long enough to be sent. <b>Done.</b>"]
    assert len(api.sent) == 1  # edited in place, not sent anew
