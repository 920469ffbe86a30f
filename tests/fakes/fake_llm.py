"""An in-process fake model: queued replies, recorded requests (like simonw/llm's MockModel)."""

from __future__ import annotations

import asyncio
import copy
import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from core.errors import LLMError
from core.llm import LLMResponse, ToolCall


@dataclass
class Request:
    """One recorded call."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    model: str | None
    temperature: float | None
    max_tokens: int | None = None

    def user_texts(self) -> list[str]:
        """The user messages' text, in order."""
        return [m["content"] for m in self.messages if m["role"] == "user"]


@dataclass
class FakeLLM:
    """Answers from a queue; when it is empty, echoes the last user text."""

    latency: float = 0.0
    history: list[Request] = field(default_factory=list)
    _queue: deque = field(default_factory=deque)
    #: when set, requests whose total content length exceeds it raise this error factory's result
    max_chars: int | None = None
    overflow_error: Any = None
    #: keep every request in ``history`` (benchmarks switch it off: the deep copies are the fake's cost)
    record: bool = True
    calls: int = 0

    def enqueue(self, item: str | LLMResponse | LLMError | list[tuple[str, dict]]) -> FakeLLM:
        """Queue a reply: text, a full response, an error to raise, or a list of (tool name, args)."""
        self._queue.append(item)
        return self

    def enqueue_tools(self, *calls: tuple[str, dict[str, Any]]) -> FakeLLM:
        """Queue an answer that calls tools."""
        return self.enqueue(list(calls))

    async def complete(self, messages, *, tools=None, model=None, temperature=None, max_tokens=None,
                       retry=None) -> LLMResponse:
        """Record the request and answer from the queue (one try: a queued error is raised as it is)."""
        self.calls += 1
        if self.record:
            self.history.append(Request(copy.deepcopy(messages), tools, model, temperature, max_tokens))
        if self.latency:
            await asyncio.sleep(self.latency)
        if self.max_chars is not None and _size(messages) > self.max_chars:
            raise self.overflow_error()
        if not self._queue:
            last = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
            return LLMResponse(content=f"echo: {last}")
        item = self._queue.popleft()
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, LLMResponse):
            return item
        if isinstance(item, list):
            n = self.calls
            calls = tuple(ToolCall(id=f"call_{n}_{i}", name=name, arguments=json.dumps(args))
                          for i, (name, args) in enumerate(item))
            return LLMResponse(content=None, tool_calls=calls)
        return LLMResponse(content=str(item))

    async def close(self) -> None:
        """Nothing to close."""


def _size(messages: list[dict[str, Any]]) -> int:
    total = 0
    for m in messages:
        total += len(m.get("content") or "")
        for call in m.get("tool_calls") or []:
            total += len(call["function"]["arguments"])
    return total
