"""The model boundary, as narrow as simonw/llm's ``Model.execute``: one method, dataclasses in and out.

The OpenAI-compatible implementation is :mod:`agent.llm`; tests use a fake that needs no inheritance.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from core.retry import RetryPolicy


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model asked for."""

    id: str
    name: str
    arguments: str  # JSON object text; "{}" when the model's own text was not valid JSON (see ``error``)
    #: why the model's arguments could not be used (they were not valid JSON); the tool is not run
    error: str | None = None

    def to_message(self) -> dict[str, Any]:
        """The OpenAI ``tool_calls`` entry."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage reported by the provider (all zero when it reported none)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: the part of ``prompt_tokens`` the server read from its prompt cache (``prompt_tokens_details``)
    cached_tokens: int = 0

    @property
    def reported(self) -> bool:
        """True when the server said anything (no real request has zero prompt tokens)."""
        return bool(self.prompt_tokens or self.completion_tokens)

    @property
    def total(self) -> int:
        """Prompt and completion tokens: what the caps count (cached tokens are part of the prompt's)."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class LLMResponse:
    """One model answer: text, tool calls, or both.

    ``content`` is what may be shown: ``<think>`` blocks are already removed. ``reasoning_content`` is the
    model's reasoning (DeepSeek and Kimi thinking modes, or the removed ``<think>`` text); it is never
    shown, and it is kept on tool-call messages because those providers require it back within a turn.
    """

    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    reasoning_content: str | None = None

    def to_message(self) -> dict[str, Any]:
        """The assistant message in OpenAI chat format (with ``reasoning_content`` on tool-call turns)."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [tc.to_message() for tc in self.tool_calls]
            if self.reasoning_content:
                msg["reasoning_content"] = self.reasoning_content
        return msg


class BaseLLM(Protocol):
    """What the agent needs from a model."""

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        retry: RetryPolicy | None = None,
    ) -> LLMResponse:
        """Send one chat-completions request and return the answer, or raise an :class:`LLMError`.

        ``max_tokens`` caps the answer; None means the client's own default cap. The client retries
        transient failures (:class:`~core.errors.TransientLLMError`) with ``retry``, None meaning its own
        policy; a caller that owns the retries of its requests passes :data:`core.retry.ONE_TRY`.
        """
        ...

    async def close(self) -> None:
        """Release the client's connections (at stop)."""
        ...


class ReplySlots(Protocol):
    """The request slots of an endpoint that serves a few requests at once (agent/slots.py)."""

    def reply_coming(self) -> AbstractContextManager[None]:
        """While a turn prepares and makes its reply's calls, background calls take no free slot."""
        ...


@runtime_checkable
class SlottedLLM(BaseLLM, Protocol):
    """A model client whose endpoint may serve a limited number of requests at once (``model_max_parallel``)."""

    #: None while the endpoint is not limited
    slots: ReplySlots | None


#: Called with each new piece of visible answer text while a reply streams.
TextCallback = Callable[[str], Awaitable[None]]


@runtime_checkable
class StreamingLLM(BaseLLM, Protocol):
    """A model client that can also stream: the answer arrives piece by piece, then as a whole."""

    async def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        on_text: TextCallback | None = None,
    ) -> LLMResponse:
        """Like :meth:`complete`, calling ``on_text`` with each visible text piece as it arrives."""
        ...


@runtime_checkable
class Transcriber(Protocol):
    """A model client that can also turn speech into text (``/audio/transcriptions``)."""

    async def transcribe(self, audio: bytes, *, filename: str, model: str) -> str:
        """The transcript of ``audio`` (an OGG/Opus voice note, or any format the endpoint takes)."""
        ...
