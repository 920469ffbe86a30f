"""BaseChannel's two ways of handing a message over: awaited, and without waiting."""

from __future__ import annotations

import asyncio
import logging

from core.messages import IncomingMessage
from tests.fakes.channel import RecordingChannel


def msg(chat_id: str, text: str) -> IncomingMessage:
    return IncomingMessage(channel="telegram", chat_id=chat_id, user_id=chat_id, text=text)


async def test_deliver_nowait_uses_the_submitter_synchronously():
    channel = RecordingChannel()
    submitted: list[str] = []
    awaited: list[str] = []

    async def handler(m: IncomingMessage) -> None:
        awaited.append(m.text)

    channel.set_handler(handler, submit=lambda m: submitted.append(m.text))
    for i in range(3):
        channel.deliver_nowait(msg("1", f"a{i}"))
        channel.deliver_nowait(msg("2", f"b{i}"))
    assert submitted == ["a0", "b0", "a1", "b1", "a2", "b2"]  # taken before any await
    await asyncio.sleep(0)
    assert awaited == []


async def test_without_a_submitter_a_chat_waits_for_its_earlier_message_but_others_do_not():
    channel = RecordingChannel()
    release = asyncio.Event()
    seen: list[str] = []

    async def slow(m: IncomingMessage) -> None:
        if m.text == "slow":
            await release.wait()
        seen.append(m.text)

    channel.set_handler(slow)
    channel.deliver_nowait(msg("1", "slow"))
    channel.deliver_nowait(msg("1", "after slow"))
    channel.deliver_nowait(msg("2", "other chat"))
    for _ in range(5):
        await asyncio.sleep(0)
    assert seen == ["other chat"]
    release.set()
    async with asyncio.timeout(5):
        await asyncio.gather(*set(channel._backlog_tasks))
    assert seen == ["other chat", "slow", "after slow"]
    assert channel._backlog == {}  # nothing kept for idle chats


async def test_without_a_submitter_a_failing_message_does_not_stop_the_chat(caplog):
    channel = RecordingChannel()
    seen: list[str] = []

    async def handler(m: IncomingMessage) -> None:
        if m.text == "boom":
            raise ValueError("boom")
        seen.append(m.text)

    channel.set_handler(handler)
    with caplog.at_level(logging.ERROR, logger="channels.base"):
        for text in ("one", "boom", "two"):
            channel.deliver_nowait(msg("1", text))
        async with asyncio.timeout(5):
            await asyncio.gather(*set(channel._backlog_tasks))
    assert seen == ["one", "two"]
    [record] = [r for r in caplog.records if r.name == "channels.base"]
    assert record.getMessage() == "channel telegram: could not deliver a message of chat 1"
    assert record.exc_info and isinstance(record.exc_info[1], ValueError)
