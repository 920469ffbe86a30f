"""The model client: the official ``openai`` SDK, with our retries and our error tree.

:class:`OpenAILLM` holds an ``AsyncOpenAI`` (or ``AsyncAzureOpenAI`` when ``azure_api_version`` is set:
then ``base_url`` is the resource endpoint and ``model`` the deployment) on the SDK's aiohttp transport,
and sends each request with the SDK's low-level ``post("/chat/completions", cast_to=object)``: the SDK's
headers, authentication, timeouts, proxies and exception classes, with the JSON answer as a plain dict.
The typed ``chat.completions.create()`` validates every message of the history on each call, which costs
several times more CPU and grows with the history (bench/llm_client.py; figures in the README).

The SDK's own retries are off (``max_retries=0``): the client retries timeouts, connection errors, 429
and 5xx with one policy (:data:`core.retry.MODEL_CALL`: three tries, honouring ``Retry-After`` within a
total deadline), and never retries quota, auth, overflow or a bad request. A caller that owns the
retries of its requests (the summariser) asks for one try with ``retry=ONE_TRY``. Provider errors are
classified by :mod:`agent.provider_errors`; answers are read by :mod:`agent.completion`.

A stream is checked like an answer (DESIGN §2.4): one that ends without a finish reason (cut by the server, or
an empty 200 stream) raises :class:`StreamCutError`, a transient error, so it is asked again; after two such
streams (or at once after an empty one: llama-cpp-python answers a streamed request over its window so) it is
asked once without streaming, where the server's real error, an overflow say, comes back over HTTP. Requests
to the endpoint hold one of its slots (:mod:`agent.slots`, ``model_max_parallel``).

Every answer's usage goes to the client's :class:`~core.usage.UsageSink` (DESIGN §12): one record per HTTP
answer, each tool round and each retried try that got one, and a cut stream whose usage chunk had come. A
streamed request asks for usage with ``stream_options.include_usage``; an endpoint that refuses the field
(400 or 422: Ollama's older versions, Mistral, Groq, Azure's older API versions, LM Studio) is asked again
without it, and from then on never gets it (its usage is then counted with the tokenizer).
"""

from __future__ import annotations

import contextlib
import logging
import socket
from typing import TYPE_CHECKING, Any

from agent.completion import StreamAssembler, parse_completion, valid_value
from agent.provider_errors import classify
from agent.slots import ModelSlots, automatic_parallel
from core.errors import (
    EndpointRefusedError,
    EndpointUnresolvedError,
    LLMError,
    NotConfiguredError,
    OtherLLMError,
    StreamCutError,
    ToolsUnsupportedError,
    TransientLLMError,
)
from core.llm import LLMResponse, TextCallback, Usage
from core.retry import MODEL_CALL, RetryPolicy
from core.usage import UsageSink

if TYPE_CHECKING:
    import openai
    from tenacity import RetryCallState

logger = logging.getLogger(__name__)

#: The answer cap when neither the caller nor ``agent_max_output_tokens`` gives one.
DEFAULT_MAX_OUTPUT_TOKENS = 4096
#: After this many cut streams a call is asked once without streaming (DESIGN §2.4).
STREAM_FAILURES_BEFORE_PLAIN = 2
#: Models that refuse ``max_tokens`` and want ``max_completion_tokens`` (OpenAI reasoning models).
_COMPLETION_TOKENS_PREFIXES = ("o1", "o3", "o4", "gpt-5")


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, TransientLLMError)


def _log_retry(state: RetryCallState) -> None:
    logger.warning("model call failed (%s), retry %d in %.1fs", state.outcome.exception(), state.attempt_number,
                   state.upcoming_sleep)


def token_param(model: str) -> str:
    """``max_completion_tokens`` for the models that refuse ``max_tokens`` (o-series, gpt-5), else ``max_tokens``."""
    name = model.rsplit("/", 1)[-1].lower()
    return "max_completion_tokens" if name.startswith(_COMPLETION_TOKENS_PREFIXES) else "max_tokens"


class OpenAILLM:
    """An OpenAI-compatible chat-completions client (OpenAI, Azure, DeepSeek, Ollama, vLLM, llama.cpp, ...)."""

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str,
        model: str,
        timeout: float = 120.0,
        retry_base_delay: float = 0.5,
        azure_api_version: str = "",
        max_output_tokens: int = 0,
        deadline: float | None = MODEL_CALL.deadline,
        http_client: Any = None,
        max_parallel: int = 0,
        usage: UsageSink | None = None,
    ) -> None:
        self.model = model
        self.api_key = api_key
        self.base_url = base_url.rstrip("/")
        self.azure_api_version = azure_api_version
        self.timeout = timeout
        self.max_output_tokens = max_output_tokens or DEFAULT_MAX_OUTPUT_TOKENS
        #: how transient failures are retried: no retry whose wait would end ``deadline`` s after the first try
        self.retry = MODEL_CALL.but(first=retry_base_delay, deadline=deadline)
        self._http_client = http_client
        self._client: openai.AsyncOpenAI | None = None
        #: models whose server refused tools: their requests go without tools from then on
        self.no_tools: set[str] = set()
        #: True once the endpoint refused ``stream_options``: streams then go without it
        self.no_stream_options = False
        #: where each answer's usage goes (DESIGN §12); None records nothing
        self.usage = usage
        self._options: dict[str, Any] = {}
        #: requests in flight at once (``model_max_parallel``; 0: one for a local endpoint, else unlimited)
        self.max_parallel = automatic_parallel(self.base_url, max_parallel)
        self.slots = ModelSlots(self.max_parallel) if self.max_parallel else None

    def _open(self) -> openai.AsyncOpenAI:
        """The SDK client, made on first use (importing the SDK is not free, and start-up skips it)."""
        if self._client is None:
            import openai

            http_client = self._http_client or openai.DefaultAioHttpClient(timeout=self.timeout)
            # Local servers (Ollama, vLLM, llama.cpp) need no key, but the SDK wants one: without a key,
            # each request omits the Authorization header explicitly.
            key = self.api_key or "none"
            self._options = {} if self.api_key else {"headers": {"Authorization": openai.omit}}
            if self.azure_api_version:
                self._client = openai.AsyncAzureOpenAI(
                    api_key=key, azure_endpoint=self.base_url, api_version=self.azure_api_version,
                    max_retries=0, timeout=self.timeout, http_client=http_client)
            else:
                self._client = openai.AsyncOpenAI(api_key=key, base_url=self.base_url, max_retries=0,
                                                  timeout=self.timeout, http_client=http_client)
        return self._client

    def _body(self, messages, tools, model, temperature, max_tokens) -> dict[str, Any]:
        # A stored message with a broken character must not poison every later request of its session.
        body: dict[str, Any] = {"model": model, "messages": valid_value(messages)}
        if tools and model not in self.no_tools:
            body["tools"] = tools
        if temperature is not None:
            body["temperature"] = temperature
        cap = self.max_output_tokens if max_tokens is None else min(max_tokens, self.max_output_tokens)
        body[token_param(model)] = max(1, cap)
        return body

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
        """Send one request, retrying transient failures (``retry``, else the client's policy); a server that
        refuses tools is asked without."""
        model = model or self.model
        body = self._body(messages, tools, model, temperature, max_tokens)
        policy = retry or self.retry
        try:
            return await policy.call(self._once, body, model, retry_on=_transient, before_sleep=_log_retry)
        except ToolsUnsupportedError:
            if "tools" not in body:
                raise
            self._drop_tools(model)
            body.pop("tools")
            return await policy.call(self._once, body, model, retry_on=_transient, before_sleep=_log_retry)

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
        """Stream one answer (server-sent events): ``on_text`` gets each visible text piece as it arrives.

        Tool calls are assembled from their deltas and usage is read from the last chunk. Failures before
        the first chunk are retried like :meth:`complete`; once text was shown, an error is raised as is.
        """
        model = model or self.model
        body = self._body(messages, tools, model, temperature, max_tokens)
        body["stream"] = True
        if not self.no_stream_options:
            body["stream_options"] = {"include_usage": True}
        shown: list[str] = []

        async def show(piece: str) -> None:
            shown.append(piece)
            if on_text is not None:
                await on_text(piece)

        cuts = 0

        async def attempt() -> LLMResponse:
            nonlocal cuts
            if cuts >= STREAM_FAILURES_BEFORE_PLAIN:  # the server's real error comes back over HTTP
                logger.warning("model %s: streaming failed (cut twice, or empty); asking once without streaming",
                               model)
                plain = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
                response = await self._once(plain, model)
                if response.content:
                    await show(response.content)
                return response
            try:
                return await self._stream_once(body, model, show)
            except StreamCutError as exc:
                # An empty stream may be an overflow the server does not say in a stream: ask plainly next.
                cuts = STREAM_FAILURES_BEFORE_PLAIN if exc.code == "empty_stream" else cuts + 1
                raise

        refused: OtherLLMError | None = None  # the error of the request with stream_options, while asked without
        while True:
            try:
                response = await self.retry.call(attempt, before_sleep=_log_retry,
                                                 retry_on=lambda exc: _transient(exc) and not shown)
            except ToolsUnsupportedError:
                if "tools" not in body:
                    raise
                self._drop_tools(model)
                body.pop("tools")
                continue
            except OtherLLMError as exc:
                if refused is not None:  # refused without the field too: it was not the field
                    raise
                # 400 or 422, and not always naming the field ("Extra inputs are not permitted"): asked once
                # more without it; only when that is answered is the endpoint known to refuse it.
                if "stream_options" not in body or exc.status not in (400, 422) or shown:
                    raise
                logger.warning("model %s: the request with stream_options was refused (%s); asking without",
                               model, exc)
                refused = exc
                body.pop("stream_options")
                continue
            if refused is not None and not self.no_stream_options:
                logger.warning("the endpoint %s refuses stream_options: streaming without the server's usage from "
                               "now on (counted with the tokenizer)", self.base_url)
                self.no_stream_options = True
            return response

    def _drop_tools(self, model: str) -> None:
        if model not in self.no_tools:
            logger.warning("the server cannot take tools for model %s: answering without tools from now on",
                           model)
            self.no_tools.add(model)

    def _slot(self) -> Any:
        """One of the endpoint's request slots (none to wait for when unlimited)."""
        return self.slots.slot() if self.slots is not None else contextlib.nullcontext()

    async def _once(self, body: dict[str, Any], model: str) -> LLMResponse:
        client = self._open()
        async with self._slot(), _sdk_errors(model):
            data = await client.post("/chat/completions", cast_to=object, body=body, options=self._options)
        response = parse_completion(data, model=model)
        await self._record(body, model, response.usage, response)
        return response

    async def _record(self, body: dict[str, Any], model: str, usage: Usage, response: LLMResponse | None) -> None:
        """Hand one answer's usage to the sink (with what it needs to count it when the server said nothing)."""
        if self.usage is None:
            return
        answer = ""
        if response is not None:
            answer = "".join((response.content or "", response.reasoning_content or "",
                              *(call.name + call.arguments for call in response.tool_calls)))
        await self.usage.model_call(model, usage, body["messages"], body.get("tools"), answer)

    async def _stream_once(self, body: dict[str, Any], model: str, on_text: TextCallback) -> LLMResponse:
        import openai

        client = self._open()
        assembler = StreamAssembler(model)
        chunks = 0
        async with self._slot(), _sdk_errors(model):
            events = await client.post("/chat/completions", cast_to=object, body=body, options=self._options,
                                       stream=True, stream_cls=openai.AsyncStream[object])
            try:
                if "json" in events.response.headers.get("content-type", ""):  # a 200 whose body is an error
                    whole = parse_completion(await events.response.aread(), model=model)
                    await self._record(body, model, whole.usage, whole)
                    if whole.content:
                        await on_text(whole.content)
                    return whole
                async for chunk in events:
                    chunks += 1
                    shown = assembler.add(chunk)
                    if shown:
                        await on_text(shown)
            except Exception:
                if assembler.usage is not None:  # a stream cut after its usage came: the tokens were spent
                    await self._record(body, model, assembler.result_usage(), None)
                raise
            finally:
                await events.close()
        if assembler.finish_reason is None:
            if assembler.usage is not None:  # cut after its usage came: the tokens were spent
                await self._record(body, model, assembler.result_usage(), None)
            if not chunks:
                raise StreamCutError("the model's stream was empty (no data, no [DONE])", code="empty_stream")
            raise StreamCutError(f"the model's stream ended without a finish reason after {chunks} chunk(s)")
        tail = assembler.think.flush()
        if tail:
            await on_text(tail)
        response = assembler.result()
        await self._record(body, model, response.usage, response)
        return response

    async def transcribe(self, audio: bytes, *, filename: str, model: str) -> str:
        """The text of a voice message: ``POST /audio/transcriptions`` (multipart, as OpenAI's) with ``model``.

        The one call site of transcription (usage recording, purpose ``transcribe``, hooks in here). Transient
        failures are retried like a chat request; anything else is raised as an :class:`LLMError`.
        """
        client = self._open()
        headers = self._options.get("headers")

        async def once() -> str:
            async with self._slot(), _sdk_errors(model):
                result = await client.audio.transcriptions.create(
                    file=(filename, audio, "audio/ogg"), model=model, extra_headers=headers)
            text = (result.text or "").strip()
            if self.usage is not None:  # tokens when the model bills by token; else the transcript's count
                billed = result.usage
                usage = Usage(billed.input_tokens, billed.output_tokens) if billed is not None and \
                    billed.type == "tokens" else Usage()
                await self.usage.model_call(model, usage, [], None, text)
            return text

        return await self.retry.call(once, retry_on=_transient, before_sleep=_log_retry)

    async def server_json(self, method: str, path: str, body: Any = None) -> Any:
        """The JSON answer of the model server for ``path`` at its root (``/props``, ``/api/show``): for window
        discovery (agent/window.py). Errors are raised as :class:`LLMError`."""
        root = self.base_url.removesuffix("/v1")
        client = self._open()
        options = {**self._options, "timeout": 3.0}
        async with _sdk_errors(self.model):
            if method == "POST":
                return await client.post(root + path, cast_to=object, body=body, options=options)
            return await client.get(root + path, cast_to=object, options=options)

    async def close(self) -> None:
        """Close the connections."""
        if self._client is not None:
            await self._client.close()
            self._client = None


class _sdk_errors:  # noqa: N801 - used as a context manager, reads like a function
    """Turns the SDK's exceptions into our error tree, classified by :mod:`agent.provider_errors`."""

    def __init__(self, model: str) -> None:
        self.model = model

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, kind, exc, tb) -> bool:
        if exc is None or isinstance(exc, LLMError):
            return False
        import openai

        if isinstance(exc, openai.APIStatusError):
            raise classify(exc.status_code, exc.body, exc.response.headers, model=self.model) from exc
        if _caused_by(exc, ConnectionRefusedError):  # the aiohttp transport reports it as a timeout
            raise EndpointRefusedError("the model endpoint refused the connection") from exc
        if _caused_by(exc, socket.gaierror):
            raise EndpointUnresolvedError("the model endpoint's host name does not resolve") from exc
        if isinstance(exc, openai.APITimeoutError):
            raise TransientLLMError("model request timed out") from exc
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc
            raise TransientLLMError(f"cannot reach the model endpoint: {type(cause).__name__}: {cause}") from exc
        if isinstance(exc, openai.APIError):  # an error event inside a stream
            raise classify(None, exc.body if exc.body is not None else exc.message, model=self.model) from exc
        return False


def _caused_by(exc: BaseException | None, kind: type[BaseException]) -> bool:
    """True when an exception of ``kind`` is among the causes of ``exc``."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, kind):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


NO_MODEL_HINT = (
    "No model is configured. Set OPENAI_API_KEY (or open_ai_api_key in config.json), or point "
    "open_ai_api_base at a local OpenAI-compatible server such as Ollama "
    "(e.g. http://127.0.0.1:11434/v1), then restart."
)


class UnconfiguredLLM:
    """Stands in when no key and no custom endpoint are set: every call explains how to configure one."""

    async def complete(self, messages, *, tools=None, model=None, temperature=None, max_tokens=None,
                       retry=None) -> LLMResponse:
        """Always raise :class:`NotConfiguredError` with the configuration hint."""
        raise NotConfiguredError(NO_MODEL_HINT)

    async def stream(self, messages, *, tools=None, model=None, temperature=None, max_tokens=None,
                     on_text=None) -> LLMResponse:
        """Always raise :class:`NotConfiguredError` with the configuration hint."""
        raise NotConfiguredError(NO_MODEL_HINT)

    async def close(self) -> None:
        """Nothing to close."""

