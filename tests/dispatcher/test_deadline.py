"""A hung model: the turn has a total deadline, the user hears "still working" and then a clear message.

The real ``openai`` SDK talks to the fake OpenAI server, which hangs; the deadlines are shortened. Nothing here
asserts how long a step took on the wall clock (the machine may be busy): what ended the turn is told from what
the server saw and from a server delay far longer than any deadline.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from agent.llm import OpenAILLM
from dispatcher.replies import STILL_WORKING_REPLY, TRANSIENT_REPLY
from tests.dispatcher.test_dispatcher import Bot
from tests.fakes.openai_server import FakeOpenAIServer


@pytest.fixture
def server():
    with FakeOpenAIServer() as fake:
        yield fake


async def test_a_hung_model_ends_in_a_clear_message_within_the_turn_deadline(tmp_path, server):
    server.latency = 120.0  # far longer than the turn may take: an answer before it is the deadline's doing
    llm = OpenAILLM(api_key="k", base_url=server.base_url, model="m", retry_base_delay=0.01)
    async with Bot(tmp_path, llm) as bot:
        bot.agent.turn_deadline = 2.0
        bot.dispatcher.still_working_after = 0.5
        started = time.monotonic()
        await bot.say("are you there?")
        assert await bot.channel.wait_for(2, within=60) == [STILL_WORKING_REPLY, TRANSIENT_REPLY]
        assert time.monotonic() - started >= 2.0  # not before the deadline
        assert bot.channel.typing_calls >= 1
        await bot.dispatcher.wait_idle()
        assert await bot.store.journal.pending() == []
        server.latency = 0
        await bot.say("and now?")
        assert (await bot.channel.wait_for(3))[2] == "echo: and now?"
    await llm.close()


async def test_the_deadline_counts_tool_rounds_too(tmp_path, server):
    llm = OpenAILLM(api_key="k", base_url=server.base_url, model="m", retry_base_delay=0.01)
    async with Bot(tmp_path, llm) as bot:
        bot.agent.turn_deadline = 6.0
        bot.dispatcher.still_working_after = 60
        server.latency = 4.0  # each call fits the deadline with room to spare; two do not
        server.enqueue_tool_calls([("current_time", "{}")])
        await bot.say("what time is it?")
        assert await bot.channel.wait_for(1, within=60) == [TRANSIENT_REPLY]
        assert len(server.requests) == 2  # the tool round's call ran; the second call is what the deadline cut
        await asyncio.sleep(0)
    await llm.close()


async def test_a_quick_answer_gets_no_note(tmp_path, server):
    llm = OpenAILLM(api_key="k", base_url=server.base_url, model="m", retry_base_delay=0.01)
    async with Bot(tmp_path, llm) as bot:
        bot.dispatcher.still_working_after = 3.0  # far more than an echo takes, even on a busy machine
        await bot.say("hi")
        assert await bot.channel.wait_for(1) == ["echo: hi"]
        await asyncio.sleep(3.5)  # past the note's time: it was called off with the answer
        assert bot.channel.texts() == ["echo: hi"]
    await llm.close()
