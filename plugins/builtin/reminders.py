"""Built-in plugin: ``/remind``, ``/reminders`` (DESIGN §1.4) and the tools ``schedule_message``,
``list_reminders``, ``cancel_reminder`` (§1.8), so the model sets reminders from plain requests."""

from __future__ import annotations

import logging

from agent.tools.base import ToolContext, tool
from dispatcher.commands import CommandRequest
from plugins.hookspecs import hookimpl
from reminders.actions import cancel_text, list_text, remind_command_text, reminders_command_text, schedule_text
from store.reminders import Reminders

logger = logging.getLogger(__name__)

NO_CHAT = "Error: reminders can only be set while answering a chat message."


@hookimpl
def register_commands(register) -> None:
    """Register /remind and /reminders."""
    register("remind", remind_command, "/remind <when> <text>: a reminder in this chat (in 20m, at 18:30, "
                                       "tomorrow 9:00, 2026-12-24 08:00, every day 9:00, 明天早上9点)")
    register("reminders", reminders_command, "this chat's pending reminders; /reminders cancel <n> cancels one")


@hookimpl
def register_tools(register) -> None:
    """Register schedule_message, list_reminders and cancel_reminder."""
    for t in (schedule_message, list_reminders, cancel_reminder):
        register(t)


async def remind_command(request: CommandRequest) -> str:
    """``/remind <when> <text>``."""
    services = request.services
    return await remind_command_text(services.store.reminders, services.config().zone(), request.message,
                                     request.session_id, request.command.args)


async def reminders_command(request: CommandRequest) -> str:
    """``/reminders`` and ``/reminders cancel <n>``."""
    services = request.services
    return await reminders_command_text(services.store.reminders, services.config().zone(), request.message,
                                        request.session_id, request.command.args, request.is_admin)


def _reminders(ctx: ToolContext) -> Reminders:
    if ctx.store is None:
        raise RuntimeError("the reminder tools need the conversation store in their context")
    return ctx.store.reminders


@tool
async def schedule_message(ctx: ToolContext, when: str, text: str, every: str | None = None) -> str:
    """Set a reminder: at ``when`` the bot sends ``text`` in this chat (the user's local time zone).

    Use it when the user asks to be reminded of something. Returns when it will fire, or an error to fix.

    Args:
        when: e.g. "in 20m", "at 18:30", "tomorrow 9:00", "2026-12-24 08:00", "明天早上9点", "20分钟后"
        text: the reminder's text as the user should read it, e.g. "call mum"
        every: only to repeat it: "day 9:00", "monday 9:00", "week", "2 hours", "每天早上9点" (then when may be "")
    """
    if ctx.message is None:
        return NO_CHAT
    return await schedule_text(_reminders(ctx), ctx.config.zone(), ctx.message, ctx.session_id, when, text, every)


@tool
async def list_reminders(ctx: ToolContext) -> str:
    """List this chat's pending reminders, numbered (the numbers cancel_reminder takes), with when each fires."""
    return await list_text(_reminders(ctx), ctx.config.zone(), ctx.session_id)


@tool
async def cancel_reminder(ctx: ToolContext, n: int) -> str:
    """Cancel one of this chat's pending reminders by its number in list_reminders.

    Args:
        n: the reminder's number, from list_reminders
    """
    if ctx.message is None:
        return NO_CHAT
    admin = ctx.services is not None and ctx.services.admins.is_admin(ctx.message)
    return await cancel_text(_reminders(ctx), ctx.session_id, int(n), ctx.message, admin)
