"""Tests for dispatcher/replies.py: the sentence a user gets for each kind of failure."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agent.llm import NO_MODEL_HINT
from config.settings import Config
from core.errors import (
    AuthLLMError,
    EndpointRefusedError,
    ModelNotFoundError,
    NotConfiguredError,
    OtherLLMError,
    QuotaLLMError,
    TransientLLMError,
)
from core.messages import IncomingMessage, ReplyStream
from dispatcher.replies import (
    AUTH_REPLY,
    ERROR_REPLY,
    QUOTA_REPLY,
    TRANSIENT_REPLY,
    StreamedReply,
    error_reply,
    keep_typing,
)
from tests.fakes.channel import RecordingChannel

CFG = Config(model="qwen2.5:7b", open_ai_api_base="http://127.0.0.1:11434/v1")


@pytest.mark.parametrize(("exc", "reply"), [
    (NotConfiguredError("no key"), NO_MODEL_HINT),
    (TransientLLMError("503"), TRANSIENT_REPLY),
    (AuthLLMError("bad key", status=401), AUTH_REPLY),
    (QuotaLLMError("insufficient_quota", status=429), QUOTA_REPLY),
    (OtherLLMError("400"), ERROR_REPLY),
    (RuntimeError("bug"), ERROR_REPLY),
])
def test_each_failure_has_its_sentence(exc, reply):
    assert error_reply("telegram:1", exc, CFG) == reply


def test_a_refused_endpoint_names_open_ai_api_base():
    reply = error_reply("telegram:1", EndpointRefusedError("refused"), CFG)
    assert reply == ("The model endpoint http://127.0.0.1:11434/v1 refused the connection: check that the model "
                     "server is running and that open_ai_api_base in config.json points at it.")


def test_an_unknown_model_is_named():
    reply = error_reply("telegram:1", ModelNotFoundError("no such model", status=404), CFG)
    assert "'qwen2.5:7b'" in reply and "http://127.0.0.1:11434/v1" in reply


def test_quota_tells_the_log_the_account_needs_attention(caplog):
    with caplog.at_level(logging.ERROR):
        error_reply("telegram:1", QuotaLLMError("Insufficient Balance", status=402), CFG)
    assert "account needs attention" in caplog.text


class _Stream(ReplyStream):
    """A reply stream that shows nothing."""

    async def push(self, text: str) -> None:
        """Nothing to show."""

    async def finish(self, text: str) -> None:
        """Nothing to show."""

    async def discard(self) -> None:
        """Nothing to show."""


class _TypingChannel(RecordingChannel):
    """Tells the test of each "typing…" it shows."""

    def __init__(self) -> None:
        super().__init__()
        self.typed = asyncio.Event()

    async def typing(self, to: IncomingMessage) -> None:
        await super().typing(to)
        self.typed.set()


async def test_typing_stops_when_its_turn_ends_as_the_answer_goes_idle():
    """Issue 40 §1, the same lost stop as the history indexer's: ``keep_typing`` idled in ``asyncio.wait_for``,
    which on Python 3.11 swallows a cancellation that meets the end of the inner wait. A turn that ended just as
    its streamed answer went idle (tool calls) left "typing…" in the chat every few seconds, for ever."""
    channel = _TypingChannel()
    streamed = StreamedReply(_Stream())
    typing = asyncio.create_task(keep_typing(channel, channel.message("hi"), streamed))
    await channel.typed.wait()  # shown; it now waits (same step) for the answer to go idle
    channel.typed.clear()
    streamed.idle.set()  # the answer stops streaming for tool calls…
    typing.cancel()  # …and the turn ends at that moment
    typed_again = asyncio.ensure_future(channel.typed.wait())
    await asyncio.wait({typing, typed_again}, return_when=asyncio.FIRST_COMPLETED)
    typed_again.cancel()
    swallowed = channel.typed.is_set()
    if swallowed:  # cancel it again, so that the test ends
        typing.cancel()
    await asyncio.gather(typing, return_exceptions=True)
    assert not swallowed, "the cancellation was swallowed: typing went on"
    assert typing.cancelled() and channel.typing_calls == 1


def test_a_resumed_answer_quotes_its_question_before_the_configured_prefix():
    from channels.base import BaseChannel
    from core.messages import IncomingMessage
    from dispatcher.replies import with_prefix
    from dispatcher.resume import QUOTE_CHARS, answering

    class Plain(BaseChannel):
        name = "plain"

        async def start(self, intake: bool = True) -> None: ...

        async def stop(self) -> None: ...

        async def send(self, to, text) -> None: ...

    class Threaded(Plain):
        threads_replies = True

    cfg = Config(single_chat_reply_prefix="[bot] ")
    msg = IncomingMessage(channel="plain", chat_id="1", user_id="1", user_name="u", text="line one\nline two")
    assert with_prefix(cfg, msg, "hi") == "[bot] hi"
    assert with_prefix(cfg, answering(msg, Plain()), "hi") == "> line one\n> line two\n\n[bot] hi"
    assert with_prefix(cfg, answering(msg, Threaded()), "hi") == "[bot] hi"  # the platform points at it
    assert with_prefix(cfg, answering(msg, Plain()), "") == ""  # no answer, no quote alone
    long = IncomingMessage(channel="plain", chat_id="1", user_id="1", user_name="u", text="x" * 1000)
    quoted = with_prefix(Config(), answering(long, Plain()), "hi")
    assert quoted.startswith("> x") and quoted.endswith("…\n\nhi") and len(quoted) < QUOTE_CHARS + 10
    photo = IncomingMessage(channel="plain", chat_id="1", user_id="1", user_name="u", text="", content_type="photo")
    assert with_prefix(Config(), answering(photo, Plain()), "nice") == "> [photo]\n\nnice"
