"""The hooks around a message that the dispatcher calls; the plugin manager implements them."""

from __future__ import annotations

from typing import Any

from core.messages import IncomingMessage


class MessageHooks:
    """Hooks around a message; the plugin manager overrides them. The defaults change nothing."""

    async def before_agent(self, msg: IncomingMessage, text: str) -> str | None:
        """Return the text to give the agent, or None to skip the agent (no reply)."""
        return text

    async def after_reply(self, msg: IncomingMessage, reply: str) -> str:
        """Return the reply to send."""
        return reply


async def user_message(hooks: MessageHooks, msg: IncomingMessage, text: str,
                       media: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The turn's user message: ``text`` after the ``before_agent`` hooks (with a photo's or voice note's keys);
    None when a hook asked to skip the agent. It runs once per message: at intake when the message is stored
    with its journal entry (dispatcher/journal.py), else in its turn (dispatcher/handlers.py)."""
    hooked = await hooks.before_agent(msg, text)
    return None if hooked is None else {"role": "user", "content": hooked, **(media or {})}
