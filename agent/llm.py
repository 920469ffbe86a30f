"""The model boundary: one method, dataclasses in and out, and an OpenAI-compatible implementation.

The SDK's own retries are off (``max_retries=0``); :class:`OpenAILLM` retries timeouts, 429 and 5xx
itself, with backoff, honouring ``Retry-After``. Errors are classified into the tree of
:mod:`agent.errors`, and a context overflow is recognised precisely: never a rate limit, never a
generic 400.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import random
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.errors import (
    AuthLLMError,
    ContextOverflowError,
    LLMError,
    NotConfiguredError,
    OtherLLMError,
    TransientLLMError,
)

logger = logging.getLogger(__name__)

#: Provider messages that mean "the request is longer than the context window". Lower case.
#: Curated from OpenAI, Azure, Anthropic-compatible proxies, DeepSeek, vLLM, llama.cpp and Ollama.
OVERFLOW_MESSAGES: tuple[str, ...] = (
    "maximum context length",
    "context length exceeded",
    "context_length_exceeded",
    "prompt is too long",
    "context window",
    "exceeds the context",
    "too many tokens",
    "input is too long",
    "reduce the length of the messages",
    "longer than the model's context length",
    "request too large for model",
    "exceed_context_size_error",
)

#: How many attempts a transient failure gets in total.
MAX_TRIES = 3


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model asked for."""

    id: str
    name: str
    arguments: str  # JSON text, as the model produced it

    def to_message(self) -> dict[str, Any]:
        """The OpenAI ``tool_calls`` entry."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage reported by the provider."""

    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True, slots=True)
class LLMResponse:
    """One model answer: text, tool calls, or both."""

    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None

    def to_message(self) -> dict[str, Any]:
        """The assistant message in OpenAI chat format."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [tc.to_message() for tc in self.tool_calls]
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
    ) -> LLMResponse:
        """Send one chat-completions request and return the answer, or raise an :class:`LLMError`."""
        ...


def is_overflow(status: int | None, code: str | None, message: str) -> bool:
    """True when a provider error means the request exceeds the context window."""
    if status == 429:
        return False
    if code == "context_length_exceeded":
        return True
    text = message.lower()
    return any(needle in text for needle in OVERFLOW_MESSAGES)


def _retry_after(headers: Any) -> float | None:
    if headers is None:
        return None
    for name in ("retry-after-ms", "retry-after"):
        value = headers.get(name)
        if not value:
            continue
        try:
            seconds = float(value)
        except ValueError:
            continue
        return seconds / 1000 if name.endswith("-ms") else seconds
    return None


def classify(exc: Exception) -> LLMError:
    """Map an SDK exception to our error tree."""
    if isinstance(exc, LLMError):
        return exc
    import openai  # loaded already by the client that raised (see OpenAILLM.client)

    if isinstance(exc, openai.APITimeoutError):
        return TransientLLMError("model request timed out")
    if isinstance(exc, openai.APIConnectionError):
        return TransientLLMError(f"cannot reach the model endpoint: {exc}")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        code = getattr(exc, "code", None)
        message = str(getattr(exc, "message", "") or exc)
        if is_overflow(status, code, message):
            return ContextOverflowError(message, status=status, code=code)
        if status == 429 or status >= 500 or status == 408:
            return TransientLLMError(message, status=status, code=code,
                                     retry_after=_retry_after(exc.response.headers))
        if status in (401, 403):
            return AuthLLMError(message, status=status, code=code)
        return OtherLLMError(message, status=status, code=code)
    return OtherLLMError(f"{type(exc).__name__}: {exc}")


def backoff_delay(attempt: int, retry_after: float | None, base: float = 0.5, cap: float = 20.0) -> float:
    """Seconds to wait before retry ``attempt`` (1-based): ``Retry-After`` if given, else jittered exponential."""
    if retry_after is not None:
        return min(max(retry_after, 0.0), 60.0)
    return min(cap, base * 2 ** (attempt - 1)) * (0.5 + random.random() / 2)


async def with_retries(call, *, tries: int = MAX_TRIES, sleep=asyncio.sleep, base_delay: float = 0.5):
    """Run ``call()`` up to ``tries`` times, retrying :class:`TransientLLMError` with backoff."""
    for attempt in range(1, tries + 1):
        try:
            return await call()
        except TransientLLMError as exc:
            if attempt == tries:
                raise
            delay = backoff_delay(attempt, exc.retry_after, base=base_delay)
            logger.warning("model call failed (%s), retry %d/%d in %.1fs", exc, attempt, tries - 1, delay)
            await sleep(delay)
    raise AssertionError("unreachable")


class OpenAILLM:
    """An OpenAI-compatible chat-completions client (OpenAI, DeepSeek, Ollama, vLLM, llama.cpp, ...)."""

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str,
        model: str,
        timeout: float = 120.0,
        http_client: Any = None,
        retry_base_delay: float = 0.5,
    ) -> None:
        self.model = model
        self.retry_base_delay = retry_base_delay
        if importlib.util.find_spec("openai") is None:  # fail at start, not at the first message
            raise ModuleNotFoundError("the openai package is missing: python -m pip install -r requirements.txt")
        # Local servers (Ollama, vLLM, ...) need no key, but the SDK insists on one.
        self._options: dict[str, Any] = {"api_key": api_key or "not-needed", "base_url": base_url.rstrip("/"),
                                         "max_retries": 0, "timeout": timeout, "http_client": http_client}
        self._client: Any = None

    @property
    def client(self) -> Any:
        """The SDK client, made at first use: importing the SDK takes ~0.6 s, which start-up skips (app.py
        imports it in the background right after "ready")."""
        if self._client is None:
            import openai

            options = dict(self._options)
            if options["http_client"] is None:
                # The SDK's own aiohttp transport: httpx's connection pool cost ~2 ms of CPU per request
                # under load (bench/concurrency.py), aiohttp's a fraction of that.
                options["http_client"] = openai.DefaultAioHttpClient(timeout=options["timeout"])
            self._client = openai.AsyncOpenAI(**options)
        return self._client

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        model: str | None = None,
        temperature: float | None = None,
    ) -> LLMResponse:
        """Send one request, retrying transient failures."""
        body: dict[str, Any] = {"model": model or self.model, "messages": messages}
        if tools:
            body["tools"] = tools
        if temperature is not None:
            body["temperature"] = temperature
        return await with_retries(lambda: self._once(body), base_delay=self.retry_base_delay)

    async def _once(self, body: dict[str, Any]) -> LLMResponse:
        # The SDK client's own transport, errors and timeouts, but neither its per-request walk over the
        # typed params (our messages are plain JSON already) nor its pydantic response models: the body
        # is posted as is and the answer comes back as the decoded JSON (``cast_to=object``).
        try:
            data = await self.client.post("/chat/completions", body=body, cast_to=object, options=_OPTIONS)
        except Exception as exc:  # noqa: BLE001 - classified into our tree
            raise classify(exc) from exc
        return parse_completion(data)

    async def close(self) -> None:
        """Close the HTTP client."""
        if self._client is not None:
            await self._client.close()


#: What ``chat.completions.create`` passes for every request: the API key as a bearer token.
_OPTIONS: dict[str, Any] = {"security": {"bearer_auth": True}}


def parse_completion(data: Any) -> LLMResponse:
    """An :class:`LLMResponse` from a decoded chat-completion body."""
    if isinstance(data, (str, bytes)):  # a server that labels its JSON with another content type
        try:
            data = json.loads(data)
        except ValueError:
            raise OtherLLMError("the model endpoint did not answer with JSON") from None
    if not isinstance(data, dict):
        raise OtherLLMError("the model endpoint did not answer with a JSON object")
    choices = data.get("choices")
    if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise OtherLLMError("the model returned no choices")
    choice = choices[0]
    msg = choice.get("message") or {}
    calls = tuple(
        ToolCall(id=tc.get("id") or "", name=fn.get("name") or "", arguments=fn.get("arguments") or "{}")
        for tc in (msg.get("tool_calls") or [])
        if isinstance(tc, dict) and isinstance(fn := tc.get("function"), dict)
    )
    usage = Usage()
    if isinstance(raw := data.get("usage"), dict):
        usage = Usage(raw.get("prompt_tokens") or 0, raw.get("completion_tokens") or 0)
    return LLMResponse(content=msg.get("content"), tool_calls=calls, usage=usage,
                       finish_reason=choice.get("finish_reason"))


NO_MODEL_HINT = (
    "No model is configured. Set OPENAI_API_KEY (or open_ai_api_key in config.json), or point "
    "open_ai_api_base at a local OpenAI-compatible server such as Ollama "
    "(e.g. http://127.0.0.1:11434/v1), then restart."
)


class UnconfiguredLLM:
    """Stands in when no key and no custom endpoint are set: every call explains how to configure one."""

    async def complete(self, messages, *, tools=None, model=None, temperature=None) -> LLMResponse:
        """Always raise :class:`NotConfiguredError` with the configuration hint."""
        raise NotConfiguredError(NO_MODEL_HINT)

    async def close(self) -> None:
        """Nothing to close."""


def parse_arguments(arguments: str) -> dict[str, Any]:
    """Parse a tool call's JSON arguments; raise ``ValueError`` with a readable message."""
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        raise ValueError(f"tool arguments are not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError("tool arguments must be a JSON object")
    return value


__all__ = [
    "BaseLLM", "LLMResponse", "ToolCall", "Usage", "OpenAILLM", "UnconfiguredLLM", "classify",
    "is_overflow", "with_retries", "parse_completion", "backoff_delay", "parse_arguments", "NO_MODEL_HINT", "LLMError",
]
