"""The hooks around a message that the dispatcher calls; the plugin manager implements them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.messages import IncomingMessage

if TYPE_CHECKING:
    from dispatcher.intake import WorkItem


class MessageHooks:
    """Hooks around a message; the plugin manager overrides them. The defaults change nothing."""

    async def before_agent(self, msg: IncomingMessage, text: str) -> str | None:
        """Return the text to give the agent, or None to skip the agent (no reply)."""
        return text

    async def after_reply(self, msg: IncomingMessage, reply: str) -> str:
        """Return the reply to send."""
        return reply


async def user_message(hooks: MessageHooks, item: WorkItem) -> dict[str, Any] | None:
    """The turn's user message: the item's text after the ``before_agent`` hooks, which run here and only here,
    once per item (at intake when the message is stored with its journal entry, else in its turn); None when a
    hook asked to skip the agent."""
    if item.user_message is None and not item.skipped:
        text = await hooks.before_agent(item.message, item.text)
        if text is None:
            item.skipped = True
        else:
            item.user_message = {"role": "user", "content": text, **(item.media or {})}
    return item.user_message
