"""The steps a message goes through once its turn comes (dispatcher/steps.py): one ordered tuple, and a new
per-message rule is one step put in its place."""

from __future__ import annotations

import pytest

from dispatcher.replies import TEXT_ONLY_REPLY
from dispatcher.steps import (
    STEPS,
    Answer,
    Answering,
    Next,
    agent_turn,
    answer,
    answered,
    cap_before_media,
    command,
    media_note,
    reply_hooks,
    text_only,
)
from tests.dispatcher.test_dispatcher import Bot


def test_the_steps_are_declared_in_order_in_one_place() -> None:
    assert STEPS == (reply_hooks, command, text_only, cap_before_media, media_note, agent_turn)


async def test_a_new_rule_is_one_step_and_answers_before_the_agent(tmp_path) -> None:
    seen: list[str] = []

    async def no_secrets(a: Answering, next: Next) -> Answer:  # noqa: A002
        seen.append(a.kind)
        if "secret" in a.text:
            return answered("refused (a secret)", "Not here, please.")
        return await next(a)

    async with Bot(tmp_path) as bot:
        bot.dispatcher.steps = (*STEPS[:-1], no_secrets, STEPS[-1])
        await bot.say("my secret is 42")
        assert await bot.channel.wait_for(1) == ["Not here, please."]
        await bot.say("hello")
        assert await bot.channel.wait_for(2) == ["Not here, please.", "echo: hello"]
        await bot.say("/nope")  # a command is answered by the first step: the new one never sees it
        await bot.channel.wait_for(3)
        await bot.dispatcher.wait_idle()
        assert seen == ["text", "text"]
        assert bot.llm.calls == 1  # the refused message never reached the model
        assert await bot.store.journal.pending() == []


async def test_the_steps_keep_the_text_only_note_and_the_typing(tmp_path) -> None:
    async with Bot(tmp_path) as bot:
        await bot.dispatcher.handle(bot.channel.message("", content_type="sticker"))
        assert await bot.channel.wait_for(1) == [TEXT_ONLY_REPLY]
        await bot.say("hi")
        assert (await bot.channel.wait_for(2))[1] == "echo: hi"
        assert bot.channel.typing_calls >= 1


async def test_a_chain_where_no_step_answers_is_an_error() -> None:
    async def hand_on(a: Answering, next: Next) -> Answer:  # noqa: A002
        return await next(a)

    with pytest.raises(LookupError):
        await answer((hand_on,), None)  # type: ignore[arg-type]
