"""The conversation pages: a searchable list, one conversation's transcript by turn with its context boundary,
injected summary, fact check, memory files and notes; clear, forget (after a confirmation) and export."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web
from yarl import URL

from console import data
from console.server import console_of
from core.records import SessionInfo
from memory.daily import LONG_TERM_FILE, session_dir_name
from memory.forget import forget_session

if TYPE_CHECKING:
    from dispatcher.commands import Services

logger = logging.getLogger(__name__)


def add_routes(router: web.UrlDispatcher) -> None:
    """Register the conversation pages."""
    router.add_get("/conversations", list_page)
    router.add_get("/conversation", detail_page)
    router.add_post("/conversation/clear", clear)
    router.add_get("/conversation/forget", forget_confirm)
    router.add_post("/conversation/forget", forget)
    router.add_get("/conversation/export", export)


#: Token counts of stored messages by (session, seq): a stored message never changes, so one count serves
#: every later view of the list.
_TOKENS: dict[tuple[str, int], int] = {}
#: Fact checks of injected summaries by (session, boundary, turns, summary): a check reads every covered turn.
_CHECKS: dict[tuple[str, int, int, str], data.SummaryCheck | None] = {}
MAX_CACHED = 200_000


def count_tokens(services: Services, contexts: dict[str, list[tuple[int, dict[str, Any]]]]) -> dict[str, int]:
    """The tokens now in each conversation's context, counted with the model's tokenizer (in a worker thread)."""
    counter = services.agent.counter(services.config().model)
    if len(_TOKENS) > MAX_CACHED:
        _TOKENS.clear()
    totals = {}
    for sid, messages in contexts.items():
        total = 0
        for seq, message in messages:
            n = _TOKENS.get((sid, seq))
            if n is None:
                n = _TOKENS[(sid, seq)] = counter.count_message(message)
            total += n
        totals[sid] = total
    return totals


async def list_page(request: web.Request) -> web.StreamResponse:
    """Conversations, most recently active first, with their turns and the tokens now in context."""
    console = console_of(request)
    services = console.services
    query = request.query.get("q", "")
    rows = await services.store.sessions.listing(query, data.LIST_LIMIT)
    contexts = await services.store.sessions.context_messages(rows)
    totals = await asyncio.to_thread(count_tokens, services, contexts)
    for row in rows:
        row.tokens = totals.get(row.session_id, 0)
    return console.render(request, "conversations.html", title="Conversations", rows=rows, q=query,
                          limit=data.LIST_LIMIT)


def memory_files(services: Services, session_id: str) -> list[tuple[str, str]]:
    """The conversation's memory files, daily files newest first and MEMORY.md last: ``(name, text)``."""
    folder = services.memory.session_dir(session_id)
    if not folder.is_dir() or folder.is_symlink():
        return []
    files = [p for p in folder.glob("*.md") if p.is_file() and not p.is_symlink()]
    daily = sorted((p for p in files if p.name != LONG_TERM_FILE), key=lambda p: p.name, reverse=True)
    notes = [p for p in files if p.name == LONG_TERM_FILE]
    return [(p.name, p.read_text(encoding="utf-8", errors="replace")) for p in daily + notes]


async def _session(request: web.Request, session_id: str) -> dict[str, Any]:
    row = await console_of(request).services.store.sessions.row(session_id)
    if row is None:
        raise web.HTTPNotFound(text=f"There is no conversation {session_id!r} (it may have been forgotten).")
    return row


async def detail_page(request: web.Request) -> web.StreamResponse:
    """One conversation: transcript by turn, the boundary, the summary and its check, memory files and notes."""
    console = console_of(request)
    services = console.services
    sid = request.query.get("id", "")
    row = await _session(request, sid)
    messages = await services.store.sessions.last_messages(sid, data.TRANSCRIPT_LIMIT)
    turns, check = await asyncio.to_thread(transcript_and_check, row, messages)
    files = await asyncio.to_thread(memory_files, services, sid)
    return await console.render_off_loop(
        request, "conversation.html", title=row["title"] or sid, row=row, turns=turns, check=check, files=files,
        notes_file=LONG_TERM_FILE, shown_limit=data.TRANSCRIPT_LIMIT, message_count=len(messages),
        notice=request.query.get("notice", ""))


def transcript_and_check(row: dict[str, Any], messages: list[data.Stored]) -> tuple[list[data.ShownTurn], Any]:
    """The transcript by turn and the summary's fact check (kept while the summary and boundary stay)."""
    turns = data.transcript(messages, row["context_start_seq"])
    key = (row["session_id"], row["context_start_seq"], row["summary_turns"], row["summary"] or "")
    if key not in _CHECKS:
        if len(_CHECKS) > 1000:
            _CHECKS.clear()
        _CHECKS[key] = data.summary_check(row["summary"], row["summary_turns"], row["context_start_seq"], messages)
    return turns, _CHECKS[key]


def _info(row: dict[str, Any]) -> SessionInfo:
    return SessionInfo(session_id=row["session_id"], channel=row["channel"], chat_id=row["chat_id"],
                       user_id=row["user_id"] or "", is_group=bool(row["is_group"]), title=row["title"] or "")


def _back(sid: str, notice: str) -> web.HTTPSeeOther:
    return web.HTTPSeeOther(str(URL("/conversation").with_query(id=sid, notice=notice)))


async def clear(request: web.Request) -> web.StreamResponse:
    """Empty the context as ``/context clear`` does: turns never summarised go to memory first."""
    services = console_of(request).services
    form = await request.post()
    sid = str(form.get("id", ""))
    row = await _session(request, sid)
    info = _info(row)
    saved = await services.sessions.clear(info)
    if info.is_group:  # the group's background goes too, as with /context clear
        await services.store.groups.delete(info.channel, info.chat_id)
    logger.info("web console: context of %s cleared (%d turns to memory)", sid, saved)
    raise _back(sid, f"Context cleared; {saved} turn(s) go to the memory file.")


async def forget_confirm(request: web.Request) -> web.StreamResponse:
    """Ask before forgetting a conversation."""
    console = console_of(request)
    sid = request.query.get("id", "")
    row = await _session(request, sid)
    return console.render(request, "forget.html", title="Forget a conversation", row=row)


async def forget(request: web.Request) -> web.StreamResponse:
    """Delete the conversation's stored history, memory files, notes and search index, as ``/forget confirm``."""
    console = console_of(request)
    services = console.services
    form = await request.post()
    sid = str(form.get("id", ""))
    await _session(request, sid)
    if form.get("confirm") != "yes":
        raise web.HTTPSeeOther(str(URL("/conversation/forget").with_query(id=sid)))
    report = await services.sessions.erase(sid, lambda: forget_session(services.store, services.memory, sid))
    if services.memory_search is not None:
        services.memory_search.forget(sid)
    logger.info("web console: %s forgotten", sid)
    return console.render(request, "message.html", title="Forgotten", message=f"{sid}: {report.describe()}",
                          back="/conversations")


def _jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


async def export(request: web.Request) -> web.StreamResponse:
    """Everything stored for the conversation as one JSON file: its row, messages, memory files and notes."""
    services = console_of(request).services
    sid = request.query.get("id", "")
    row = await _session(request, sid)
    messages = await services.store.sessions.last_messages(sid, 10**9)
    files = await asyncio.to_thread(memory_files, services, sid)
    body = {
        "session": {k: _jsonable(v) for k, v in row.items()},
        "messages": [{"seq": seq, "created_at": _jsonable(at), "message": m} for seq, m, at in messages],
        "memory_files": {name: text for name, text in files},
    }
    name = f"{session_dir_name(sid)}.json"
    return web.Response(body=json.dumps(body, ensure_ascii=False, indent=2).encode("utf-8"),
                        content_type="application/json", charset="utf-8",
                        headers={"Content-Disposition": f'attachment; filename="{Path(name).name}"'})
