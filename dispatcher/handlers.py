"""What a session worker does with one message: run its command, or give its text to the agent.

A resumed message (crash resume) whose answer was stored before the crash gets that answer again instead of
a second model call; otherwise its context is cut back to its own user message and the turn runs again.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

from agent.loop import Agent
from agent.session import SessionState
from agent.sessions import SessionManager
from agent.turn import AgentTurn, AnswerSink, FinalAnswer, TurnResult
from channels.base import BaseChannel
from core.messages import IncomingMessage
from core.usage import speaker_of, usage_scope
from dispatcher.background import background_lines
from dispatcher.commands import CommandRegistry, CommandRequest
from dispatcher.hooks import MessageHooks, user_message
from dispatcher.intake import Accepted
from dispatcher.journal import Journalled, Skipped, StoredUser
from dispatcher.replies import ADMIN_ONLY_REPLY, PRIVATE_ONLY_REPLY, UNKNOWN_COMMAND_REPLY
from store.store import Store
from usage.caps import ALLOWED, Turn

if TYPE_CHECKING:
    from dispatcher.commands import Services

logger = logging.getLogger(__name__)


async def run_command(commands: CommandRegistry, item: Accepted, is_admin: bool, services: Services,
                      channel: BaseChannel | None = None) -> str | None:
    """Run the message's command (after the admin and private-chat checks) and return its reply."""
    assert item.command is not None
    name = item.command.command
    command = commands.get(name)
    if command is None:
        return UNKNOWN_COMMAND_REPLY.format(command=name)
    if command.private_only and item.message.is_group:
        return PRIVATE_ONLY_REPLY.format(command=name)
    if command.admin_only and not is_admin:
        return ADMIN_ONLY_REPLY.format(command=name)
    request = CommandRequest(message=item.message, command=item.command, session=item.info,
                             is_admin=is_admin, services=services, channel=channel)
    return await command.handler(request)


#: ``gate(message)``: around its turn, whether it may run and on which model (the usage caps, usage/caps.py).
CapGate = Callable[[Accepted], AbstractAsyncContextManager[Turn]]


async def run_agent(j: Journalled, text: str, media: dict[str, Any] | None, *, sessions: SessionManager,
                    agent: Agent, store: Store, hooks: MessageHooks, sink: AnswerSink | None = None,
                    gate: CapGate | None = None) -> tuple[str, int, str, str | None]:
    """Run the agent's turn for the message (``text``, with a photo's or voice note's ``media`` keys) on its
    session's lock; return the answer, its tool calls, what the user got (``ok``, or the notice: ``empty``,
    ``cut …``, for the log line), and the reply kept in the outbox with the answer (None: none).

    With a ``sink`` the answer streams into it as the model writes it (a stored answer does not). With a
    ``gate``, a turn over a usage cap runs on the fallback model, or is answered with the gate's sentence: its
    message stays stored, and it is not answered later (the sentence is its answer).
    """
    if isinstance(j.intake, Skipped):
        return "", 0, "skipped", None
    item = j.accepted
    state = await sessions.get(item.info)
    kept: list[str] = []  # the reply the final-answer callback kept in the outbox with the answer
    async with state.lock:
        if j.user_seq is None:
            message = await user_message(hooks, item.message, text, media)
            if message is None:
                return "", 0, "held by a plugin", None
            await state.add_user(message, j.inbox_id)  # stored, linked to its journal row, before any model call
        else:
            intake = j.intake.message if isinstance(j.intake, StoredUser) else None  # else a crash resume
            if intake is None:
                answer = await stored_answer(store, item.info.session_id, j.user_seq)
                if answer is not None:
                    return answer, 0, "ok (stored answer)", None
            await state.resume(j.user_seq, intake)
        async with (gate or _uncapped)(item) as turn:
            decision = turn.decision
            if decision.refusal is not None:
                return decision.refusal, 0, f"refused (the {decision.cap} cap)", None
            speaker = speaker_of(item.message.channel, item.message.user_id)
            with state.showing(await background_lines(store, item.message, agent.config())), \
                    usage_scope(item.info.session_id, speaker, "reply", tally=turn.tally):
                result = await call_agent(agent, state, item.message, sink, _keeping_reply(state, j, kept),
                                          decision.model)
    outcome = result.outcome if decision.model is None else f"{result.outcome} (on {decision.model}: the " \
        f"{decision.cap} cap)"
    return result.text, result.tool_calls, outcome, kept[-1] if kept else None


async def call_agent(agent: Agent, state: SessionState, message: IncomingMessage, sink: AnswerSink | None,
                     final: FinalAnswer | None, model: str | None) -> TurnResult:
    """The one call of the agent for a message's turn: everything the turn needs is passed here."""
    return await agent.run_turn(state, AgentTurn(sink=sink, final=final, model=model, message=message))


@asynccontextmanager
async def _uncapped(item: Accepted) -> AsyncIterator[Turn]:
    yield Turn(ALLOWED)


async def stored_answer(store: Store, session_id: str, user_seq: int) -> str | None:
    """For a resumed turn: the final answer, if it was stored before the crash.

    The turn is what follows its user message up to the next user message: later turns of the session
    may be stored too (a crash after this answer was sent but before it was marked answered).
    """
    tail = await store.sessions.load_messages(session_id, user_seq)
    turn = tail[1:]
    end = next((i for i, m in enumerate(turn) if m.message.get("role") == "user"), len(turn))
    last = turn[end - 1].message if end else None
    if last and last.get("role") == "assistant" and not last.get("tool_calls"):
        return (last.get("content") or "").strip()
    return None



def _keeping_reply(state: SessionState, j: Journalled, kept: list[str]) -> FinalAnswer:
    """The agent's final-answer callback: the answer and the outbox's copy of the reply in one transaction
    (noted in ``kept``, the turn's own list: the outbox then need not keep it again)."""
    inbox_id = j.inbox_id

    async def keep(message: dict[str, Any], text: str) -> int:
        seq = await state.add_answer(message, inbox_id, text)
        kept.append(text)
        return seq

    return keep
