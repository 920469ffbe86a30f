"""Recording each model call's usage (DESIGN §12): the model client's sink, and the API other callers use.

The model client (agent/llm.py) calls :meth:`UsageRecorder.model_call` after every answer; the row gets the
session, speaker and purpose of the running :func:`core.usage.usage_scope`. Callers that talk to other
endpoints (voice transcription, image descriptions) call :meth:`UsageRecorder.record` with all of it.

A server that reports no usage (a stream without ``stream_options``, some local servers) is counted with the
tokenizer: the request's messages and tools, and the answer's text. A row that cannot be written (the
database is away) is kept in memory and written with the next one, up to :data:`MAX_PENDING` rows; recording
never fails a turn.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from core.llm import Usage
from core.usage import PURPOSES, current_scope
from store.usage import UsageStore

logger = logging.getLogger(__name__)

#: Rows kept in memory while the database is away; older ones are dropped (and logged) past this.
MAX_PENDING = 10_000


class TokenCount(Protocol):
    """A model's tokenizer (``agent.tokens.TokenCounter``): what a call the server reported nothing for cost."""

    def count_message(self, message: dict[str, Any]) -> int: ...

    def count_text(self, text: str) -> int: ...


class UsageRecorder:
    """Writes one ``usage`` row per model call."""

    def __init__(self, store: UsageStore, counter: Callable[[str], TokenCount]) -> None:
        self.store = store
        #: ``counter(model)``: the tokenizer that counts a call the server reported no usage for
        self.counter = counter
        self._pending: list[dict[str, Any]] = []
        #: rows written since start (for tests and the log)
        self.written = 0

    async def model_call(self, model: str, usage: Usage, request: list[dict[str, Any]],
                         tools: list[dict[str, Any]] | None, answer: str) -> None:
        """Record a chat-completions call for the running scope; counted with the tokenizer when the server
        reported nothing (:class:`core.usage.UsageSink`)."""
        scope = current_scope()
        if not usage.reported:
            try:
                usage = self.estimate(model, request, tools, answer)
            except Exception:  # noqa: BLE001 - a count that fails is no reason to lose the row
                logger.warning("counting a model call's tokens failed", exc_info=True)
        if scope.tally is not None:
            scope.tally[0] += usage.total
        await self.record(scope.session_id, scope.user_id, model, scope.purpose, usage)

    def estimate(self, model: str, request: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                 answer: str) -> Usage:
        """The tokenizer's count of a call: the request's messages and tools' schemas, and the answer."""
        counter = self.counter(model)
        prompt = sum(counter.count_message(m) for m in request)
        if tools:
            prompt += counter.count_text(json.dumps(tools))
        return Usage(prompt, counter.count_text(answer) if answer else 0)

    async def record(self, session_id: str, user_id: str, model: str, purpose: str, usage: Usage | None,
                     fallback: Usage | None = None) -> None:
        """Record one model call: ``usage`` as the server reported it, else ``fallback`` (the caller's own
        count), else zeros. ``user_id`` is the speaker, ``<channel>:<user id>`` ("" for none); ``purpose`` is
        one of :data:`core.usage.PURPOSES`. Never raises: a row the database cannot take now is written later.
        """
        if purpose not in PURPOSES:
            logger.warning("usage recorded with an unknown purpose %r; stored as 'other'", purpose)
            purpose = "other"
        chosen = usage if usage is not None and usage.reported else (fallback or usage or Usage())
        row = {"session_id": session_id[:255], "user_id": user_id[:255], "model": model[:255], "purpose": purpose,
               "prompt_tokens": chosen.prompt_tokens, "completion_tokens": chosen.completion_tokens,
               "cached_tokens": min(chosen.cached_tokens, chosen.prompt_tokens), "created_at": datetime.now(UTC)}
        rows, self._pending = [*self._pending, row], []
        try:
            await self.store.add(rows)
        except Exception as exc:  # noqa: BLE001 - the bill's record waits; the turn goes on
            self._pending = rows[-MAX_PENDING:] + self._pending
            if len(rows) > MAX_PENDING:
                logger.error("%d usage rows dropped: the database was away too long", len(rows) - MAX_PENDING)
            logger.warning("usage of a %s call not written yet (%s: %s); %d row(s) wait for the database",
                           purpose, type(exc).__name__, exc, len(self._pending))
            return
        self.written += len(rows)

    @property
    def pending(self) -> int:
        """Rows waiting for the database."""
        return len(self._pending)
