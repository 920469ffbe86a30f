"""What an OpenAI-compatible provider's error means, from its status, headers and body.

Every server says "too long", "no money" or "slow down" in its own words and shapes: OpenAI's
``{"error": {"message", "type", "code"}}``, a bare ``{"error": "..."}`` (Ollama's native shape),
``{"object": "error", "message"}`` (vLLM, SGLang), ``{"code": 20015, "message"}`` (SiliconFlow), a JSON
*list* of errors (Gemini), an upstream error nested as JSON text in ``error.metadata.raw`` (OpenRouter),
or a proxy's HTML page. :func:`error_facts` flattens all of these into codes and one lower-case text;
:func:`classify` maps them to the tree of :mod:`core.errors`. The recorded bodies these rules were written
against are in ``tests/fakes/provider_errors.py`` (``PROVIDER_ERRORS``), exactly as the servers send them.

Order matters: "cannot take tools" first (a retry without tools fixes it), then per-minute token limits
(a rate limit, never an overflow, although they say "Request too large"), quota and billing (never
retried), overflow (and any 413 that is not a per-minute limit: a proxy's size limit), authentication, unknown
model, a 404 for the path itself, and transient failures.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

from core.errors import (
    AuthLLMError,
    ContextOverflowError,
    EndpointNotFoundError,
    ImagesUnsupportedError,
    LLMError,
    ModelNotFoundError,
    OtherLLMError,
    QuotaLLMError,
    ToolsUnsupportedError,
    TransientLLMError,
)

#: Error codes and types that mean "the request is longer than the context window".
OVERFLOW_CODES = frozenset({
    "context_length_exceeded",  # OpenAI, Azure, Groq
    "exceed_context_size_error",  # llama.cpp server
    "1261",  # Zhipu: Prompt exceeds max length
    "20015",  # SiliconFlow: length of prompt_tokens must be less than max_seq_len
    "model_context_window_exceeded",  # Zhipu's finish_reason on a 200
    "request_too_large",  # Anthropic: the request is larger than its size limit
})

#: Lower-case phrases that mean the same, curated from the servers' sources and docs.
OVERFLOW_PHRASES: tuple[str, ...] = (
    "maximum context length",  # OpenAI, Azure, DeepSeek, vLLM, OpenRouter
    "context length exceeded",
    "exceeds the context window",  # OpenAI's newer wording
    "exceeds the available context size",  # llama.cpp server
    "longer than the context length",  # Ollama
    "longer than the model's context length",  # SGLang, vLLM
    "prompt is too long",  # Anthropic
    "input token count",  # Gemini: "The input token count (N) exceeds the maximum number of tokens allowed"
    "exceeded model token limit",  # Moonshot
    "range of input length should be",  # DashScope
    "must be less than max_seq_len",  # SiliconFlow
    "must be less than or equal to max_seq_len",
    "prompt exceeds max length",  # Zhipu
    "when context the overflows",  # LM Studio ("Trying to keep the first N tokens when context the overflows")
    "input length exceeds context length",
    "`inputs` tokens + `max_new_tokens` must be",  # Together (TGI)
    "context window",
    "reduce the length of the messages",
    "longer than the maximum model length",  # vLLM's engine: "The decoder prompt (length N) is longer than ..."
    "context length is only",  # vLLM: "However, the model's context length is only N tokens, resulting in ..."
    "exceeded max context length",  # Ollama <= 0.12: "prompt too long; exceeded max context length by N tokens"
    "exceeds the context length",  # Ollama: "the input length exceeds the context length"
    "exceed context limit",  # Anthropic: "input length and `max_tokens` exceed context limit: N + M > W"
    "greater than the context length",  # LM Studio: "tokens to keep from the initial prompt is greater than ..."
    "cannot truncate prompt with n_keep",  # LM Studio (llama.cpp engine): "... n_keep (N) >= n_ctx (M)"
    "reached context length of",  # LM Studio: "Reached context length of N tokens with model ... that does not"
    "context size has been exceeded",  # LM Studio's MLX engine
    "request entity too large",  # a proxy's 413 page (nginx): the history is too big for it
    "payload too large",
)

#: Per-minute limits and throttling: transient, even when the text also says "Request too large".
RATE_PHRASES: tuple[str, ...] = (
    "tokens per min", "tokens per minute", "(tpm)", "requests per min", "(rpm)", "rate limit", "rate_limit",
    "too many requests", "temporarily rate-limited", "overloaded", "please retry after",
)

#: Quota and billing: the account needs attention; retrying cannot help.
QUOTA_CODES = frozenset({
    "insufficient_quota",  # OpenAI
    "exceeded_current_quota_error",  # Moonshot
    "1113",  # Zhipu: account in arrears
    "arrearage",  # DashScope
    "insufficient_user_quota",
    "billing_hard_limit_reached",
})
QUOTA_PHRASES: tuple[str, ...] = (
    "insufficient balance", "insufficient_quota", "exceeded your current quota", "is suspended",
    "in arrears", "欠费", "credit balance is too low", "insufficient credits", "more credits",
    "make sure your account is in good standing", "billing details", "balance is insufficient",
)

AUTH_PHRASES: tuple[str, ...] = (
    "api key not valid", "api_key_invalid", "invalid api key", "incorrect api key", "invalid_api_key",
    "invalid authentication", "authentication failed", "authentication_error", "unauthorized",
)

MODEL_NOT_FOUND_CODES = frozenset({"model_not_found", "deploymentnotfound", "1211"})
MODEL_NOT_FOUND_PHRASES: tuple[str, ...] = (
    "model_not_found", "does not exist", "not found the model", "try pulling it first", "no such model",
    "is not a valid model", "model not found", "unknown model", "deployment for this resource does not exist",
)

#: The path itself is unknown (a base URL without /v1): llama.cpp's 404, Go's (Ollama) and LM Studio's answer, which
#: comes with status 200.
ENDPOINT_PHRASES: tuple[str, ...] = ("unexpected endpoint or method", "file not found", "404 page not found")

TOOLS_PHRASES: tuple[str, ...] = (
    '"auto" tool choice requires',  # vLLM without --enable-auto-tool-choice
    "does not support tools",  # Ollama
    "tool use is not supported", "tools are not supported", "does not support function calling",
    "tool calling is not supported",
)

#: The server cannot take image parts for this model (DESIGN §5.1), in each server's own words.
IMAGE_PHRASES: tuple[str, ...] = (
    "image_url is only supported by certain models",  # OpenAI and Azure: 400 "Invalid content type. ..."
    "image input is not supported",  # llama.cpp's server (500; "... - hint: ... provide the mmproj")
    "is not a multimodal model",  # vLLM: 400 "<model> is not a multimodal model"
    "does not support image input", "does not support images", "model does not support image",
    "images are not supported", "vision is not supported", "multimodal is not supported",
    "the server was not compiled for multimodal",  # llamafile / old llama.cpp server
)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


@dataclass(slots=True)
class ErrorFacts:
    """Everything an error body says, flattened: codes and types (lower case), messages, a retry delay."""

    codes: set[str] = field(default_factory=set)
    #: the first error code that names something (not a bare HTTP status)
    code: str | None = None
    messages: list[str] = field(default_factory=list)
    retry_delay: float | None = None
    html: bool = False

    @property
    def text(self) -> str:
        """All messages and codes in lower case, for phrase matching."""
        return " | ".join(self.messages + sorted(self.codes)).lower()

    @property
    def message(self) -> str:
        """The most specific message (a nested upstream one wins over a wrapper's "Provider returned error")."""
        specific = [m for m in self.messages if m and m.lower() != "provider returned error"]
        return (specific[-1] if specific else (self.messages[0] if self.messages else ""))[:500]


def error_facts(body: Any) -> ErrorFacts:
    """Flatten any provider error body (dict, list, JSON text, HTML) into :class:`ErrorFacts`."""
    facts = ErrorFacts()
    _walk(body, facts, depth=0)
    return facts


def _walk(value: Any, facts: ErrorFacts, depth: int) -> None:
    if depth > 6 or value is None:
        return
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("{", "["):
            try:
                _walk(json.loads(text), facts, depth + 1)
                return
            except ValueError:
                pass
        if text[:1] == "<" or "<html" in text[:200].lower():
            facts.html = True
            title = re.search(r"<title>(.*?)</title>", text, re.I | re.S)
            text = title.group(1).strip() if title else text
        if text:
            facts.messages.append(text[:500])
        return
    if isinstance(value, list):
        for item in value:
            _walk(item, facts, depth + 1)
        return
    if not isinstance(value, dict):
        return
    for key in ("code", "type", "status", "reason"):
        item = value.get(key)
        if isinstance(item, (str, int)) and not isinstance(item, bool) and str(item):
            facts.codes.add(str(item).lower())
            if key == "code" and facts.code is None and (isinstance(item, str) or item >= 1000):
                facts.code = str(item)
    if value.get("@type", "").endswith("RetryInfo") and isinstance(value.get("retryDelay"), str):
        match = _DURATION.match(value["retryDelay"])
        if match:
            facts.retry_delay = float(match.group(1))
    for key in ("message", "detail", "msg", "errorMessage"):
        if isinstance(value.get(key), str):
            facts.messages.append(value[key])
        elif isinstance(value.get(key), (dict, list)):
            _walk(value[key], facts, depth + 1)
    for key in ("error", "details", "metadata", "raw", "errors"):
        if key in value:
            _walk(value[key], facts, depth + 1)


def retry_after(headers: Any, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms``, or ``Retry-After`` as seconds or an HTTP date."""
    if headers is None:
        return None
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _has(text: str, phrases: tuple[str, ...]) -> bool:
    return any(p in text for p in phrases)


def classify(status: int | None, body: Any, headers: Any = None, *, model: str | None = None) -> LLMError:
    """Map a provider error (HTTP status or None for a 200, its body and headers) to our error tree."""
    facts = error_facts(body)
    message = facts.message or (f"HTTP {status}" if status else "the model endpoint returned an error")
    text = facts.text
    codes = facts.codes
    kw: dict[str, Any] = {"status": status, "code": facts.code}
    if _has(text, TOOLS_PHRASES):
        return ToolsUnsupportedError(message, **kw)
    if _has(text, IMAGE_PHRASES):
        return ImagesUnsupportedError(message, **kw)
    wait = retry_after(headers)
    if wait is None:
        wait = facts.retry_delay
    per_minute = _has(text, RATE_PHRASES) and not codes & QUOTA_CODES
    if status in (413, 429) and (per_minute or facts.retry_delay is not None):
        return TransientLLMError(message, retry_after=wait, **kw)
    if status == 402 or codes & QUOTA_CODES or _has(text, QUOTA_PHRASES):
        return QuotaLLMError(message, **kw)
    if status != 429 and (codes & OVERFLOW_CODES or _has(text, OVERFLOW_PHRASES)):
        return ContextOverflowError(message, **kw)
    if status == 413:  # a proxy's size limit (nginx's client_max_body_size): trim, never the same request again
        return ContextOverflowError(message, **kw)
    if status in (401, 403) or _has(text, AUTH_PHRASES):
        return AuthLLMError(message, **kw)
    # Anthropic says "not_found_error" for an unknown model, llama.cpp's server for an unknown path.
    named_model = "not_found_error" in codes and "model" in text
    if codes & MODEL_NOT_FOUND_CODES or named_model or (status in (400, 404) and _has(text, MODEL_NOT_FOUND_PHRASES)):
        return ModelNotFoundError(message, model=model, **kw)
    if status == 404 or _has(text, ENDPOINT_PHRASES):  # the path is unknown: a base URL without /v1, say
        return EndpointNotFoundError(message, **kw)
    if facts.html or status is not None and (status in (408, 409, 425, 429) or status >= 500):
        return TransientLLMError(message, retry_after=wait, **kw)
    if status is None and codes & {"server_error", "internal_error", "overloaded_error", "500", "503", "529"}:
        return TransientLLMError(message, retry_after=wait, **kw)
    return OtherLLMError(message, **kw)


def is_overflow(status: int | None, code: str | None, message: str) -> bool:
    """True when an error with this status, code and message is a context overflow."""
    body = {"error": {"message": message, "code": code}}
    return isinstance(classify(status, body), ContextOverflowError)


__all__ = ["ErrorFacts", "classify", "error_facts", "is_overflow", "retry_after"]
