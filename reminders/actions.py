"""Setting, listing and cancelling reminders, with the answers users and the model get (``/remind``,
``/reminders``, and the tools ``schedule_message``, ``list_reminders``, ``cancel_reminder``)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from core.messages import IncomingMessage
from reminders.when import When, WhenError, describe_rule, examples, parse_prefix, parse_rule, parse_when
from store.reminders import CancelRefused, Reminder, Reminders, TooManyReminders

logger = logging.getLogger(__name__)

REMIND_USAGE = ("Usage: /remind <when> <text>, e.g. /remind in 20m take the cake out, /remind tomorrow 9:00 call "
                f"mum, /remind 明天早上9点 给妈妈打电话. <when> can be: {examples()}.")
REMINDERS_USAGE = "Usage: /reminders lists this chat's pending reminders; /reminders cancel <n> cancels one."


def creator(msg: IncomingMessage) -> str:
    """``<channel>:<user id>`` of who set a reminder."""
    return f"{msg.channel}:{msg.user_id}"


def target_of(msg: IncomingMessage) -> dict[str, Any]:
    """What is kept of the message that set a reminder, to send it there later (chat, thread, routing)."""
    data = msg.to_json()
    data["text"] = ""
    data["reply_to_text"] = ""
    return data


def _local(at: datetime, zone: Any) -> str:
    return f"{at.astimezone(zone):%a %Y-%m-%d %H:%M} ({zone.key if hasattr(zone, 'key') else zone})"


async def set_reminder(reminders: Reminders, zone: Any, msg: IncomingMessage, session_id: str, when: When,
                       text: str) -> str:
    """Store a reminder and say when it fires (or why not)."""
    text = text.strip()
    if not text:
        return "What should I remind you of? Give the text after the time, e.g. /remind in 20m stretch."
    try:
        reminder = await reminders.add(session_id, creator(msg), when.due, text, every=when.every,
                                       target=target_of(msg))
    except TooManyReminders as exc:
        return f"Not set: {exc}."
    logger.info("session %s: reminder %d set for %s%s", session_id, reminder.id, when.due.isoformat(),
                f" ({when.every})" if when.every else "")
    repeat = f", then {describe_rule(when.every)}" if when.every else ""
    return f"OK, I'll remind you {_local(when.due, zone)}{repeat}: {text}"


async def remind_command_text(reminders: Reminders, zone: Any, msg: IncomingMessage, session_id: str,
                              args: str, now: datetime | None = None) -> str:
    """``/remind <when> <text>``."""
    if not args.strip():
        return REMIND_USAGE
    try:
        when, text = parse_prefix(args, now or datetime.now(UTC), zone)
    except WhenError as exc:
        return str(exc)
    return await set_reminder(reminders, zone, msg, session_id, when, text)


async def schedule_text(reminders: Reminders, zone: Any, msg: IncomingMessage, session_id: str, when_text: str,
                        text: str, every: str | None, now: datetime | None = None) -> str:
    """The ``schedule_message`` tool: a whole ``when`` and, apart, an optional repeat rule."""
    now = now or datetime.now(UTC)
    try:
        if every:
            rule = parse_rule(every, zone, now)
            when = When(parse_when(when_text, now, zone).due, rule.every) if when_text.strip() else rule
        else:
            when = parse_when(when_text, now, zone)
    except WhenError as exc:
        return f"Error: {exc}"
    return await set_reminder(reminders, zone, msg, session_id, when, text)


def _line(n: int, reminder: Reminder, zone: Any) -> str:
    repeat = f" ({describe_rule(reminder.every)})" if reminder.every else ""
    return f"{n}. {_local(reminder.due_at, zone)}{repeat}: {reminder.text}"


async def list_text(reminders: Reminders, zone: Any, session_id: str) -> str:
    """This chat's pending reminders, numbered (the numbers ``cancel`` takes)."""
    pending = await reminders.pending(session_id)
    if not pending:
        return "No pending reminders in this chat. Set one with /remind <when> <text>."
    lines = [f"Pending reminders ({len(pending)}):"]
    lines += [_line(n, r, zone) for n, r in enumerate(pending, 1)]
    return "\n".join(lines)


async def cancel_text(reminders: Reminders, session_id: str, n: int, msg: IncomingMessage, is_admin: bool) -> str:
    """Cancel the ``n``-th pending reminder: its creator or an admin."""
    try:
        reminder = await reminders.cancel(session_id, n, creator(msg), may_cancel_any=is_admin or not msg.is_group)
    except CancelRefused as exc:
        return str(exc)
    return f"Cancelled reminder {n}: {reminder.text}"


async def reminders_command_text(reminders: Reminders, zone: Any, msg: IncomingMessage, session_id: str,
                                 args: str, is_admin: bool) -> str:
    """``/reminders`` and ``/reminders cancel <n>``."""
    argv = args.split()
    if not argv:
        return await list_text(reminders, zone, session_id)
    if argv[0].lower() in ("cancel", "delete", "rm") and len(argv) == 2 and argv[1].isdigit():
        return await cancel_text(reminders, session_id, int(argv[1]), msg, is_admin)
    return REMINDERS_USAGE
