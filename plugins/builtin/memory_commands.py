"""Built-in plugin: ``/memory``, ``/memory rebuild`` and ``/forget`` (DESIGN §1.4)."""

from __future__ import annotations

import asyncio
import logging

from core.records import is_shared_group
from dispatcher.commands import CommandRequest
from memory.daily import LONG_TERM_FILE
from memory.forget import forget_session
from memory.index import date_of
from plugins.builtin.commands import SHARED_GROUP_REPLY
from plugins.builtin.memory_index import searcher
from plugins.hookspecs import hookimpl

logger = logging.getLogger(__name__)

MEMORY_USAGE = "Usage: /memory shows this conversation's memory; /memory rebuild re-indexes it (admins)."
FORGET_USAGE = "Usage: /forget, then /forget confirm."
FORGET_ASK = ("This deletes this conversation's stored history, its memory files, its long-term notes and "
              "its search index, for good. Send /forget confirm to go ahead.")
FORGET_ASK_PRIVATE = ("This deletes this conversation's stored history, its memory files, its long-term notes, "
                      "its search index and what I keep about you (/me), for good. Send /forget confirm to go "
                      "ahead.")
ADMINS_ONLY = "Sorry, /memory rebuild is for admins."


@hookimpl
def register_commands(register) -> None:
    """Register /memory and /forget."""
    register("memory", memory_command, "this conversation's memory; /memory rebuild re-indexes it (admins)")
    register("forget", forget_command, "delete this conversation's history and memory for good (asks first)")


def _size(n: int) -> str:
    return f"{n:,} bytes" if n < 10_000 else f"{n / 1024:,.1f} KiB"


async def memory_command(request: CommandRequest) -> str:
    """Show this session's memory, or with ``rebuild`` (admins) re-index it from its files."""
    arg = request.command.args.strip().lower()
    if arg == "rebuild":
        return await rebuild(request)
    if arg:
        return MEMORY_USAGE
    search = searcher(request.services)
    index = search.index
    sid = request.session_id
    files = await asyncio.to_thread(index.files, sid)
    daily = [p for p in files if date_of(p.name)]
    notes = next((p for p in files if p.name == LONG_TERM_FILE), None)
    models = await index.models(sid)
    chunks = sum(models.values())
    lines = [f"Memory of {sid}"]
    if daily:
        span = daily[0].name[:-3] if len(daily) == 1 else f"{daily[0].name[:-3]} to {daily[-1].name[:-3]}"
        lines.append(f"Daily files: {len(daily)} ({span})")
    else:
        lines.append("Daily files: none")
    lines.append(f"Notes ({LONG_TERM_FILE}): {_size(notes.stat().st_size)}" if notes else
                 f"Notes ({LONG_TERM_FILE}): none")
    current = index.model_name
    stale = chunks - models.get(current, 0) if current else 0
    lines.append(f"Indexed passages: {chunks}" + (f" ({stale} not embedded with the current model; "
                                                  "an admin can run /memory rebuild)" if stale else ""))
    setting = request.services.config().memory_embedding_model
    lines.append(f"Embedding model: {current} ({setting!r})" if current else
                 "Embedding model: off (memory_embedding_model is empty; keyword search only)")
    return "\n".join(lines)


async def rebuild(request: CommandRequest) -> str:
    """Re-index the session's memory files with the embedding model in force (admins)."""
    if not request.is_admin:
        return ADMINS_ONLY
    index = searcher(request.services).index
    removed, indexed = await index.rebuild(request.session_id)
    model = index.model_name or "no embedding model (keyword search only)"
    return f"Memory re-indexed: {indexed} passages with {model} (replacing {removed})."


async def forget_command(request: CommandRequest) -> str:
    """Ask for confirmation; with ``confirm``, delete the session's history, files, notes and index."""
    arg = request.command.args.strip().lower()
    if arg not in ("", "confirm"):
        return FORGET_USAGE
    if is_shared_group(request.session) and not request.is_admin:
        return SHARED_GROUP_REPLY.format(what="forget")
    private = not request.message.is_group
    if not arg:
        return FORGET_ASK_PRIVATE if private else FORGET_ASK
    services = request.services
    search = searcher(services)
    report = await services.sessions.erase(
        request.session_id, lambda: forget_session(services.store, search.index.memory, request.session_id))
    search.forget(request.session_id)
    if private:  # the person's notes go too (DESIGN §1.6); they are written only here
        report.person_notes = await asyncio.to_thread(services.people.delete, request.user_key)
    await forget_in_channel(request)
    return report.describe()


async def forget_in_channel(request: CommandRequest) -> None:
    """What the channel keeps of the chat goes too (the terminal's line history), for a private chat's /forget."""
    channel = request.channel
    if channel is not None and not request.message.is_group:
        await channel.forget_chat(request.message.chat_id)
