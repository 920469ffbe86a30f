"""What a session worker does with one work item: run its command, or give its text to the agent.

A resumed item (crash resume) whose answer was stored before the crash gets that answer again instead of
a second model call; otherwise its context is cut back to its own user message and the turn runs again.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

from agent.loop import Agent
from agent.session import SessionManager, SessionState
from agent.turn import AgentTurn, AnswerSink, FinalAnswer
from channels.base import BaseChannel
from core.usage import speaker_of, usage_scope
from dispatcher.background import background_lines
from dispatcher.commands import CommandRegistry, CommandRequest
from dispatcher.hooks import MessageHooks, user_message
from dispatcher.intake import WorkItem
from dispatcher.replies import ADMIN_ONLY_REPLY, PRIVATE_ONLY_REPLY, UNKNOWN_COMMAND_REPLY
from store.store import Store
from usage.caps import ALLOWED, Turn

if TYPE_CHECKING:
    from dispatcher.commands import Services

logger = logging.getLogger(__name__)


async def run_command(commands: CommandRegistry, item: WorkItem, is_admin: bool, services: Services,
                      channel: BaseChannel | None = None) -> str | None:
    """Run the item's command (after the admin and private-chat checks) and return its reply."""
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


#: ``gate(item)``: around the item's turn, whether it may run and on which model (the usage caps, usage/caps.py).
CapGate = Callable[[WorkItem], AbstractAsyncContextManager[Turn]]


async def run_agent(item: WorkItem, *, sessions: SessionManager, agent: Agent, store: Store,
                    hooks: MessageHooks, sink: AnswerSink | None = None,
                    gate: CapGate | None = None) -> tuple[str, int, str]:
    """Run the agent's turn for the item on its session's lock; return the answer, its tool calls and what the
    user got (``ok``, or the notice: ``empty``, ``cut …``, for the log line).

    With a ``sink`` the answer streams into it as the model writes it (a stored answer does not). With a
    ``gate``, a turn over a usage cap runs on the fallback model, or is answered with the gate's sentence: its
    message stays stored, and it is not answered later (the sentence is its answer).
    """
    if item.skipped:
        return "", 0, "skipped"
    state = await sessions.get(item.info)
    async with state.lock:
        if item.user_seq is None:
            message = await user_message(hooks, item)
            if message is None:
                return "", 0, "held by a plugin"
            await state.add_user(message, item.inbox_id)  # stored, linked to its journal row, before any model call
        else:
            intake = item.user_message if item.store_with_intake else None  # stored at intake, or a crash resume
            if intake is None:
                answer = await stored_answer(store, item)
                if answer is not None:
                    return answer, 0, "ok (stored answer)"
            await state.resume(item.user_seq, intake)
        async with (gate or _uncapped)(item) as turn:
            decision = turn.decision
            if decision.refusal is not None:
                return decision.refusal, 0, f"refused (the {decision.cap} cap)"
            speaker = speaker_of(item.message.channel, item.message.user_id)
            with state.showing(await background_lines(store, item.message, agent.config())), \
                    usage_scope(item.info.session_id, speaker, "reply", tally=turn.tally):
                # the message goes with the turn: who asked and where, for the tools that act in the chat
                result = await agent.run_turn(state, AgentTurn(sink=sink, final=_keeping_reply(state, item),
                                                               model=decision.model, message=item.message))
    outcome = result.outcome if decision.model is None else f"{result.outcome} (on {decision.model}: the " \
        f"{decision.cap} cap)"
    return result.text, result.tool_calls, outcome


@asynccontextmanager
async def _uncapped(item: WorkItem) -> AsyncIterator[Turn]:
    yield Turn(ALLOWED)


async def stored_answer(store: Store, item: WorkItem) -> str | None:
    """For a resumed turn: the final answer, if it was stored before the crash.

    The turn is what follows its user message up to the next user message: later turns of the session
    may be stored too (a crash after this answer was sent but before it was marked answered).
    """
    tail = await store.sessions.load_messages(item.info.session_id, item.user_seq)
    turn = tail[1:]
    end = next((i for i, m in enumerate(turn) if m.message.get("role") == "user"), len(turn))
    last = turn[end - 1].message if end else None
    if last and last.get("role") == "assistant" and not last.get("tool_calls"):
        return (last.get("content") or "").strip()
    return None



def _keeping_reply(state: SessionState, item: WorkItem) -> FinalAnswer | None:
    """The agent's final-answer callback: the answer and the outbox's copy of the reply in one transaction
    (``item.kept_reply`` then tells the outbox it need not keep it again)."""
    inbox_id = item.inbox_id
    if inbox_id is None:
        return None

    async def keep(message: dict[str, Any], text: str) -> int:
        seq = await state.add_answer(message, inbox_id, text)
        item.kept_reply = text
        return seq

    return keep
