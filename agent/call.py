"""One model call of a reply, with the recoveries that keep it one call for the tool loop.

- **The deadline** (DESIGN §2.4): the call ends within what is left of the turn's deadline, which streamed text
  moves on (:class:`agent.turn.Deadline`).
- **Streaming**: given the turn's :class:`~agent.turn.AnswerSink` and a client that streams, visible text goes
  to the sink as it arrives; text of a call that ends in tool calls is discarded as an answer. A stream that
  breaks after text was shown ends with that text and :data:`STREAM_BROKEN_NOTE`, stored as the answer,
  instead of an error.
- **Images refused** (DESIGN §5.1): a server that cannot take images for the model is asked again without
  them, and the refusal is remembered.

A provider "too long" is not recovered here: it is the context's to fix (agent/overflow.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast

from agent.images import Vision, has_image, without_images
from agent.slots import urgent
from core.errors import ContextOverflowError, ImagesUnsupportedError
from core.llm import BaseLLM, LLMResponse, StreamingLLM

if TYPE_CHECKING:
    from agent.turn import AgentTurn

logger = logging.getLogger(__name__)

#: Appended to an answer whose stream broke after part of it was shown (stored with it).
STREAM_BROKEN_NOTE = "(The answer was cut off: the connection to the model broke. Please ask again for the rest.)"
#: ``finish_reason`` of the answer made from a stream that broke after part of it was shown.
STREAM_BROKEN = "stream_broken"


async def call_model(llm: BaseLLM, turn: AgentTurn, messages: list[dict[str, Any]], *, tools, model: str,
                     max_tokens: int, streams: bool, vision: Vision) -> LLMResponse:
    """One model call of the turn, within its deadline; ``streams``: the client can stream."""
    call = _complete(llm, turn, messages, tools=tools, model=model, max_tokens=max_tokens, streams=streams,
                     vision=vision)
    return await (turn.deadline.run(call) if turn.deadline is not None else call)


async def _complete(llm: BaseLLM, turn: AgentTurn, messages: list[dict[str, Any]], *, tools, model: str,
                    max_tokens: int, streams: bool, vision: Vision) -> LLMResponse:
    """A reply's call takes a free slot before summaries (agent/slots.py)."""
    with urgent():
        try:
            return await _streamed(llm, turn, messages, tools=tools, model=model, max_tokens=max_tokens,
                                   streams=streams)
        except ImagesUnsupportedError:
            if not has_image(messages):
                raise
        # DESIGN §5.1: the server cannot take images for this model: answer without, and remember it.
        vision.refuse(model)
        if turn.images is not None:
            turn.images.refused = True
        return await _streamed(llm, turn, without_images(messages), tools=tools, model=model, max_tokens=max_tokens,
                               streams=streams)


async def _streamed(llm: BaseLLM, turn: AgentTurn, messages: list[dict[str, Any]], *, tools, model: str,
                    max_tokens: int, streams: bool) -> LLMResponse:
    """The call, streamed into the turn's sink when there is one and the client can stream."""
    sink = turn.sink
    if sink is None or not streams:
        return await llm.complete(messages, tools=tools, model=model, max_tokens=max_tokens)
    shown: list[str] = []
    deadline = turn.deadline

    async def on_text(piece: str) -> None:
        shown.append(piece)
        if deadline is not None:
            deadline.extend()
        await sink.text(piece)

    try:
        response = await cast(StreamingLLM, llm).stream(messages, tools=tools, model=model, max_tokens=max_tokens,
                                                        on_text=on_text)
    except Exception as exc:
        if not shown or isinstance(exc, ContextOverflowError):
            raise
        # The user has seen part of the answer: keep it and say it is cut, rather than an error reply
        # that would stand next to half an answer. What is stored is what the user ends up seeing.
        logger.warning("model stream broke after %d piece(s): %s: %s", len(shown), type(exc).__name__, exc)
        text = "".join(shown).rstrip()
        return LLMResponse(content=f"{text}\n\n{STREAM_BROKEN_NOTE}", finish_reason=STREAM_BROKEN)
    if response.tool_calls and shown:
        await sink.discard()
    return response
