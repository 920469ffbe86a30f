"""The hooks around a message that the dispatcher calls; the plugin manager implements them."""

from __future__ import annotations

from core.messages import IncomingMessage


class MessageHooks:
    """Hooks around a message; the plugin manager overrides them. The defaults change nothing."""

    async def before_agent(self, msg: IncomingMessage, text: str) -> str | None:
        """Return the text to give the agent, or None to skip the agent (no reply)."""
        return text

    async def after_reply(self, msg: IncomingMessage, reply: str) -> str:
        """Return the reply to send."""
        return reply
