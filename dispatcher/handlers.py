"""What a session worker does with one work item: run its command, or give its text to the agent.

A resumed item (crash resume) whose answer was stored before the crash gets that answer again instead of
a second model call; otherwise its context is cut back to its own user message and the turn runs again.
"""

from __future__ import annotations

import logging
from typing import Any

from agent.loop import Agent, AnswerSink
from agent.session import SessionManager, SessionState
from core.turns import CtxMessage
from dispatcher.background import background_lines
from dispatcher.commands import CommandRegistry, CommandRequest
from dispatcher.hooks import MessageHooks
from dispatcher.intake import WorkItem
from dispatcher.replies import ADMIN_ONLY_REPLY, PRIVATE_ONLY_REPLY, UNKNOWN_COMMAND_REPLY
from store.conversations import ConversationStore

logger = logging.getLogger(__name__)


async def run_command(commands: CommandRegistry, item: WorkItem, is_admin: bool, services: Any) -> str | None:
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
                             is_admin=is_admin, services=services)
    return await command.handler(request)


async def run_agent(item: WorkItem, *, sessions: SessionManager, agent: Agent, store: ConversationStore,
                    hooks: MessageHooks, sink: AnswerSink | None = None) -> tuple[str, int, str]:
    """Run the agent's turn for the item on its session's lock; return the answer, its tool calls and what the
    user got (``ok``, or the notice: ``empty``, ``cut …``, for the log line).

    With a ``sink`` the answer streams into it as the model writes it (a stored answer does not).
    """
    if item.skipped:
        return "", 0, "skipped"
    state = await sessions.get(item.info)
    async with state.lock:
        if item.user_message is not None:  # stored at intake
            assert item.user_seq is not None
            if not cut_after(state, item.user_seq):
                state.messages.append(CtxMessage(seq=item.user_seq, message=item.user_message))
        elif item.user_seq is None:
            text = await hooks.before_agent(item.message, item.text)
            if text is None:
                return "", 0, "held by a plugin"
            await agent.add_user_message(state, text, item.inbox_id)
        else:
            answer = await stored_answer(store, item)
            if answer is not None:
                return answer, 0, "ok (stored answer)"
            if not cut_after(state, item.user_seq):
                stored = await store.load_messages(item.info.session_id, item.user_seq, item.user_seq)
                state.messages.extend(CtxMessage(seq=m.seq, message=m.message) for m in stored)
        state.background = await background_lines(store, item.message, agent.config())
        try:
            result = await agent.run_turn(state, sink, reply_for=item.inbox_id)
        finally:
            state.background = []
    if result.kept:
        item.kept_reply = result.text
    return result.text, result.tool_calls, result.outcome


async def stored_answer(store: ConversationStore, item: WorkItem) -> str | None:
    """For a resumed turn: the final answer, if it was stored before the crash.

    The turn is what follows its user message up to the next user message: later turns of the session
    may be stored too (a crash after this answer was sent but before it was marked answered).
    """
    tail = await store.load_messages(item.info.session_id, item.user_seq)
    turn = tail[1:]
    end = next((i for i, m in enumerate(turn) if m.message.get("role") == "user"), len(turn))
    last = turn[end - 1].message if end else None
    if last and last.get("role") == "assistant" and not last.get("tool_calls"):
        return (last.get("content") or "").strip()
    return None


def cut_after(state: SessionState, user_seq: int) -> bool:
    """Resume: make the context end at the stored user message of the unfinished turn."""
    for i, m in enumerate(state.messages):
        if m.seq == user_seq and m.message.get("role") == "user":
            del state.messages[i + 1:]
            return True
    return False
