"""Reading a chat-completion answer, whole or streamed, into an :class:`LLMResponse`.

Providers differ in what they send back: content as a string or a list of parts, reasoning in
``reasoning_content`` (DeepSeek, Kimi) or inside ``<think>`` blocks (Qwen, DeepSeek-R1 on local servers),
tool-call arguments as JSON text, as an object, or as text that is not JSON at all, tool calls without an
id, and an ``{"error": ...}`` object with status 200. Everything here turns those into one shape: shown
text without reasoning, reasoning kept aside, tool-call arguments that are always valid JSON.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from agent.provider_errors import classify
from core.errors import ContextOverflowError, OtherLLMError, TransientLLMError
from core.llm import LLMResponse, ToolCall, Usage
from core.text import clean_text
from core.turns import content_text

_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.S)
OPEN_TAG, CLOSE_TAG = "<think>", "</think>"


def valid_value(value: Any) -> Any:
    """A JSON-like value (a message, a list of them) with every string made valid; unchanged ones are returned
    as they are, so a clean history is not copied."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        cleaned = {k: valid_value(v) for k, v in value.items()}
        return value if all(cleaned[k] is value[k] for k in value) else cleaned
    if isinstance(value, list):
        items = [valid_value(v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def split_think(text: str | None) -> tuple[str | None, str | None]:
    """``(shown text, reasoning)``: ``<think>…</think>`` blocks (an unclosed one to the end) taken out."""
    if not text or OPEN_TAG not in text:
        # A server that strips the opening tag (some Qwen/DeepSeek templates) leaves "reasoning</think>answer".
        if text and CLOSE_TAG in text:
            reasoning, _, shown = text.partition(CLOSE_TAG)
            return shown.strip(), reasoning.strip() or None
        return text, None
    thoughts = [m.strip() for m in _THINK.findall(text) if m.strip()]
    return _THINK.sub("", text).strip(), "\n\n".join(thoughts) or None


def new_call_id() -> str:
    """An id for a tool call the provider sent without one."""
    return "call_" + uuid.uuid4().hex[:24]


def tool_call(raw: Any) -> ToolCall | None:
    """A :class:`ToolCall` from one ``tool_calls`` entry; arguments made valid JSON, a missing id filled."""
    if not isinstance(raw, dict) or not isinstance(fn := raw.get("function"), dict):
        return None
    arguments = fn.get("arguments")
    error = None
    if arguments is None or arguments == "":
        text = "{}"
    elif isinstance(arguments, (dict, list)):
        text = json.dumps(arguments, ensure_ascii=False)
    else:
        text = str(arguments)
        try:
            json.loads(text)
        except ValueError as exc:
            error = f"the arguments were not valid JSON ({exc}): {text[:200]}"
            text = "{}"
    return ToolCall(id=str(raw.get("id") or new_call_id()), name=str(fn.get("name") or ""), arguments=text,
                    error=error)


def make_response(content: Any, reasoning: Any, calls: list[ToolCall], usage: Any,
                  finish_reason: str | None) -> LLMResponse:
    """Assemble an :class:`LLMResponse`: ``<think>`` taken out of the text and added to the reasoning."""
    if finish_reason == "model_context_window_exceeded":  # Zhipu says "too long" with a 200
        raise ContextOverflowError("the model's context window was exceeded", code=finish_reason)
    shown, thought = split_think(clean_text(content_text(content, sep="")) if content is not None else None)
    reasoning_text = content_text(reasoning, sep="") or None
    if reasoning_text:
        reasoning_text = clean_text(reasoning_text)
    if thought:
        reasoning_text = f"{reasoning_text}\n\n{thought}" if reasoning_text else thought
    return LLMResponse(content=shown, tool_calls=tuple(calls), usage=_usage(usage), finish_reason=finish_reason,
                       reasoning_content=reasoning_text)


def _count(value: Any) -> int:
    """A token count from a usage field: a non-negative int, 0 for anything else."""
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def _usage(raw: Any) -> Usage:
    """The answer's ``usage``: cached prompt tokens from ``prompt_tokens_details.cached_tokens`` (OpenAI, vLLM,
    llama.cpp), or ``prompt_cache_hit_tokens`` (DeepSeek)."""
    if not isinstance(raw, dict):
        return Usage()
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None:
        cached = raw.get("prompt_cache_hit_tokens")
    prompt = _count(raw.get("prompt_tokens"))
    return Usage(prompt, _count(raw.get("completion_tokens")), min(prompt, _count(cached)))


def parse_completion(data: Any, *, model: str | None = None) -> LLMResponse:
    """An :class:`LLMResponse` from a decoded chat-completion body; an error body raises its error."""
    if isinstance(data, (str, bytes)):  # a server that labels its JSON with another content type
        try:
            data = json.loads(data)
        except ValueError:
            error = classify(200, data, model=model)
            if isinstance(error, TransientLLMError):  # a proxy's HTML page
                raise error from None
            raise OtherLLMError("the model endpoint did not answer with JSON") from None
    if not isinstance(data, dict):
        raise OtherLLMError("the model endpoint did not answer with a JSON object")
    if data.get("error") and not data.get("choices"):
        raise classify(None, data, model=model)
    choices = data.get("choices")
    if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise OtherLLMError("the model returned no choices")
    choice = choices[0]
    msg = choice.get("message") or {}
    calls = [c for c in map(tool_call, msg.get("tool_calls") or []) if c is not None]
    return make_response(msg.get("content"), msg.get("reasoning_content") or msg.get("reasoning"), calls,
                         data.get("usage"), choice.get("finish_reason"))


class ThinkFilter:
    """Streams text with ``<think>`` blocks removed, also when a tag is split across chunks."""

    def __init__(self) -> None:
        self._inside = False
        self._pending = ""
        self._seen_text = False

    def feed(self, piece: str) -> str:
        """The part of ``piece`` that may be shown now (a possible partial tag is held back)."""
        text = self._pending + piece
        self._pending = ""
        out = []
        while text:
            tag = CLOSE_TAG if self._inside else OPEN_TAG
            index = text.find(tag)
            if index >= 0:
                if not self._inside:
                    out.append(text[:index])
                text = text[index + len(tag):]
                self._inside = not self._inside
                continue
            keep = _partial_tag(text, tag)
            if not self._inside:
                out.append(text[:len(text) - keep])
            self._pending = text[len(text) - keep:]
            break
        shown = "".join(out)
        if not self._seen_text:  # the text after a leading think block starts with its newlines
            shown = shown.lstrip()
            self._seen_text = bool(shown)
        return shown

    def flush(self) -> str:
        """What was held back at the end (never inside a think block)."""
        text, self._pending = self._pending, ""
        return "" if self._inside else text


def _partial_tag(text: str, tag: str) -> int:
    """How many characters at the end of ``text`` could be the start of ``tag``."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0


class StreamAssembler:
    """Collects ``chat.completion.chunk`` dicts into one answer: text, reasoning, tool calls, usage."""

    def __init__(self, model: str | None = None) -> None:
        self.model = model
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: Any = None
        self.finish_reason: str | None = None
        self.think = ThinkFilter()

    def add(self, chunk: Any) -> str:
        """Take one chunk; return the new visible text in it (possibly empty)."""
        if not isinstance(chunk, dict):
            return ""
        if chunk.get("error") and not chunk.get("choices"):
            raise classify(None, chunk, model=self.model)
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        shown = ""
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str):
                self.reasoning.append(reasoning)
            piece = clean_text(content_text(delta.get("content"), sep=""))
            if piece:
                self.text.append(piece)
                shown += self.think.feed(piece)
            for raw in delta.get("tool_calls") or []:
                self._add_call(raw)
        return shown

    def _add_call(self, raw: Any) -> None:
        if not isinstance(raw, dict):
            return
        index = raw.get("index", len(self.calls))
        call = self.calls.setdefault(index, {"id": None, "name": "", "arguments": ""})
        if raw.get("id"):
            call["id"] = raw["id"]
        fn = raw.get("function") or {}
        if fn.get("name"):
            call["name"] += fn["name"]
        args = fn.get("arguments")
        if isinstance(args, dict):
            call["arguments"] = args
        elif isinstance(args, str):
            call["arguments"] += args

    def result_usage(self) -> Usage:
        """The usage the stream reported so far (zeros when none)."""
        return _usage(self.usage)

    def result(self) -> LLMResponse:
        """The whole answer."""
        calls = [tool_call({"id": c["id"], "function": {"name": c["name"], "arguments": c["arguments"]}})
                 for _, c in sorted(self.calls.items())]
        return make_response("".join(self.text), "".join(self.reasoning) or None,
                             [c for c in calls if c is not None], self.usage, self.finish_reason)


def parse_arguments(arguments: str) -> dict[str, Any]:
    """Parse a tool call's JSON arguments; raise ``ValueError`` with a readable message."""
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        raise ValueError(f"tool arguments are not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError("tool arguments must be a JSON object")
    return value


__all__ = ["StreamAssembler", "ThinkFilter", "make_response", "parse_arguments",
           "parse_completion", "split_think", "tool_call"]
