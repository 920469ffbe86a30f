"""Built-in plugin: ``/help``, ``/context`` (``clear``, ``summary``), ``/reset`` and ``/clear`` (aliases of
``/context clear``) and ``/compact`` (DESIGN §1.4)."""

from __future__ import annotations

import logging
from collections import Counter

from core.records import is_shared_group
from dispatcher.commands import CommandRequest
from plugins.hookspecs import hookimpl

logger = logging.getLogger(__name__)

BAR_CELLS = 10
SHARED_GROUP_REPLY = "Sorry, only admins can {what} a shared group conversation."
CONTEXT_USAGE = ("Usage: /context shows this conversation's statistics; /context clear empties its context; "
                 "/context summary shows the summary now in its context.")
NO_SUMMARY_REPLY = "There is no summary in this conversation's context now."


@hookimpl
def register_commands(register) -> None:
    """Register /help, /context, /reset, /clear and /compact."""
    register("help", help_command, "list the commands")
    register("context", context_command, "this conversation's statistics; /context clear empties the context; "
                                         "/context summary shows the summary in it")
    register("reset", clear_context, "the same as /context clear")
    register("clear", clear_context, "the same as /context clear")
    register("compact", compact_command, "summarise all but the last exchange now, to free up context")


# --- /help --------------------------------------------------------------------------------------------
async def help_command(request: CommandRequest) -> str:
    """List every command with its one-line description; admin-only commands are marked."""
    lines = ["Commands:"]
    for command in request.services.commands.all():
        marks = [m for m, on in (("admins", command.admin_only), ("private chat", command.private_only)) if on]
        suffix = f" ({', '.join(marks)})" if marks else ""
        lines.append(f"/{command.name} — {command.description}{suffix}")
    return "\n".join(lines)


# --- helpers ------------------------------------------------------------------------------------------
def bar(fraction: float, cells: int = BAR_CELLS) -> str:
    """A text bar such as ``[████░░░░░░]``."""
    filled = max(0, min(cells, round(fraction * cells)))
    return "[" + "█" * filled + "░" * (cells - filled) + "]"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# --- /context -----------------------------------------------------------------------------------------
async def context_command(request: CommandRequest) -> str:
    """Show the session's statistics, or with ``clear`` empty its context."""
    arg = request.command.args.strip().lower()
    if arg == "clear":
        return await clear_context(request)
    if arg == "summary":
        return await summary_command(request)
    if arg:
        return CONTEXT_USAGE
    services = request.services
    state = await services.sessions.get(request.session)
    cfg = services.config()
    agent = services.agent
    counter = agent.counter(cfg.model)
    system = agent.system_prompt(state)
    budget = agent.budget(state, system)
    history = sum(m.tokens if m.tokens is not None else counter.count_message(m.message) for m in state.messages)
    roles = Counter(m.message.get("role", "?") for m in state.messages)
    by_role = ", ".join(f"{role} {roles[role]}" for role in ("user", "assistant", "tool", "system") if roles[role])
    # Every request carries the system prompt, the summary and the tools' schemas besides the turns: on a small
    # window the schemas alone can be half of it, so they count as used (issue 40).
    reserved, tools_tokens = agent.overhead(state, system)
    used = history + reserved + tools_tokens
    limit = budget.max_tokens + reserved + tools_tokens
    fraction = used / limit if limit else 0.0
    schemas = agent.tools.schemas()
    if state.summary:
        summary = f"yes ({_plural(state.summary_turns, 'earlier turn')}, ~{counter.count_text(state.summary):,} tokens)"
    else:
        summary = "none"
    approx = "" if counter.exact else " (estimated)"
    lines = [
        f"Context of {request.session_id}",
        f"Turns: {len(state.turns())} of {budget.max_turns}",
        f"Messages: {len(state.messages)}" + (f" ({by_role})" if by_role else ""),
        f"Tokens{approx}: {bar(fraction)} {fraction:.0%} of {limit:,} ({used:,} used, {history:,} of them by the "
        "turns)",
        f"System prompt: ~{counter.count_text(system):,} tokens",
        f"Tools' schemas: ~{tools_tokens:,} tokens ({_plural(len(schemas), 'tool')})",
        f"Model window: {agent.windows.get(cfg.model).describe()}",
        f"Summary: {summary}",
    ]
    check = last_check(services, request.session_id)
    if check is not None:
        lines.append(check)
    return "\n".join(lines)


def last_check(services, session_id: str) -> str | None:
    """The summary check of the session's last summary since start, as one line; None if there was none."""
    checked = services.summarizer.checks.get(session_id) if services.summarizer is not None else None
    if checked is None:
        return None
    if not checked.total:
        return "Last summary check: no concrete facts to keep."
    who = "the fallback" if checked.fallback else "the model's summary"
    line = (f"Last summary check: {who} kept {checked.found} of {_plural(checked.total, 'fact')} "
            f"({checked.share:.0%})")
    if checked.kept:
        line += f"; {_plural(checked.kept, 'line')} of the user's own words kept verbatim"
    return line + "."


async def summary_command(request: CommandRequest) -> str:
    """Show the summary now injected in the session's context, or say there is none."""
    state = await request.services.sessions.get(request.session)
    if not state.summary:
        return NO_SUMMARY_REPLY
    compacted = "1 earlier turn" if state.summary_turns == 1 else f"{state.summary_turns} earlier turns"
    return f"Summary in context ({compacted}):\n\n{state.summary}"


async def clear_context(request: CommandRequest) -> str:
    """Empty the context; turns never summarised go to the daily memory file first."""
    if is_shared_group(request.session) and not request.is_admin:
        return SHARED_GROUP_REPLY.format(what="clear")
    saved = await request.services.sessions.clear(request.session)
    if request.session.is_group:  # the group's background goes too (DESIGN §1.3)
        await request.services.store.groups.delete(request.session.channel, request.session.chat_id)
    if saved:
        return f"Context cleared. {_plural(saved, 'turn')} {'was' if saved == 1 else 'were'} saved to memory."
    return "Context cleared. There was nothing new to save to memory."


# --- /compact -----------------------------------------------------------------------------------------
async def compact_command(request: CommandRequest) -> str:
    """Drop all turns but the last from the context, summarise them now, and reply with the summary."""
    if is_shared_group(request.session) and not request.is_admin:
        return SHARED_GROUP_REPLY.format(what="compact")
    result = await request.services.sessions.compact(request.session)
    if not result.turns:
        return "Nothing to compact: the context holds at most one exchange."
    compacted = f"Compacted {_plural(result.turns, 'turn')}."
    if result.background:
        return (f"{compacted} The summary is being written in the background "
                "and will be added to the context when it is ready.")
    if result.failed:
        return f"{compacted} The summary could not be made just now; it will be written in the background."
    if not result.summary:
        return f"{compacted} There was nothing worth summarising."
    return f"{compacted} Summary:\n\n{result.summary}"
