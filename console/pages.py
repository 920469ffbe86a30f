"""The status page, login and logout, the reminders, and the pages that arrive with later work (WeChat QR)."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from aiohttp import web

from config.redact import database_label
from console.logs import recent_problems
from console.server import SESSION, console_of

logger = logging.getLogger(__name__)

#: The status page lists problems of this many last seconds.
PROBLEM_WINDOW_SECONDS = 3600


def add_routes(router: web.UrlDispatcher) -> None:
    """Register this module's pages."""
    router.add_get("/", status_page)
    router.add_get("/login", login_form)
    router.add_post("/login", login)
    router.add_post("/logout", logout)
    router.add_get("/reminders", reminders_page)
    router.add_get("/weixin", weixin_page)
    router.add_post("/weixin/code", weixin_code)


# --- login --------------------------------------------------------------------------------------------
def _next(value: Any) -> str:
    """Where to go after logging in: a path on this site only."""
    text = str(value or "/")
    return text if text.startswith("/") and not text.startswith("//") and "\\" not in text else "/"


async def login_form(request: web.Request) -> web.StreamResponse:
    """The login form (the password, or the start token)."""
    console = console_of(request)
    if request[SESSION].authed:
        raise web.HTTPSeeOther(_next(request.query.get("next")))
    closed = console.refusal()
    return console.render(request, "login.html", next=_next(request.query.get("next")), closed=closed)


async def login(request: web.Request) -> web.StreamResponse:
    """Check the password (or token); five failures in 10 minutes lock the address out for 10 minutes."""
    console = console_of(request)
    form = await request.post()
    target = _next(form.get("next"))
    if console.refusal():
        return console.render(request, "login.html", status=403, next=target, closed=console.refusal())
    error = console.access.attempt(request.remote or "?", str(form.get("secret") or ""))
    if error is not None:
        return console.render(request, "login.html", status=403, next=target, error=error)
    return console.log_in(request, target)


async def logout(request: web.Request) -> web.StreamResponse:
    """End the session."""
    return console_of(request).log_out(request)


# --- status -------------------------------------------------------------------------------------------
def channel_rows(console: Any) -> list[dict[str, str]]:
    """Each configured channel and its state."""
    rows = []
    seen = set()
    for channel in console.channels:
        seen.add(channel.name)
        state = f"failed: {channel.failure}" if channel.failure else "running"
        rows.append({"name": channel.name, "state": state})
    for name, why in console.channel_failures.items():
        if name not in seen:
            rows.append({"name": name, "state": f"failed: {why}"})
    return rows


async def status_page(request: web.Request) -> web.StreamResponse:
    """Channels, model and endpoint, window, database, processes, queue and the last hour's problems."""
    console = console_of(request)
    services = console.services
    cfg = services.config()
    known = services.agent.windows.get(cfg.model)  # configured, asked of the server, or the table's
    window, window_from = known.tokens, known.source
    pending = await services.store.journal.pending()
    jobs = await services.store.jobs.pending()
    leadership = console.leadership
    shared = services.locks.shared
    log_path = cfg.data_path() / "bot.log"
    problems = await asyncio.to_thread(recent_problems, log_path, PROBLEM_WINDOW_SECONDS, console.redactor())
    return console.render(
        request, "status.html", title="Status", channels=channel_rows(console), model=cfg.model,
        summary_model=cfg.effective_summary_model, endpoint=cfg.open_ai_api_base,
        model_configured=cfg.model_configured, window=window, window_from=window_from,
        database=database_label(cfg), shared=shared, pid=os.getpid(),
        leader=leadership.leading if leadership is not None else not shared, pending=len(pending), jobs=len(jobs),
        problems=problems, data_dir=str(cfg.data_path()))


# --- pages of later work ------------------------------------------------------------------------------
#: The console's reminders page lists this many pending reminders at most (soonest first).
REMINDERS_SHOWN = 500


async def reminders_page(request: web.Request) -> web.StreamResponse:
    """The pending reminders of every conversation, soonest first (read-only: /reminders cancels)."""
    from reminders.when import describe_rule

    console = console_of(request)
    services = console.services
    zone = services.config().zone()
    pending = await services.store.reminders.all_pending(REMINDERS_SHOWN)
    rows = [{"session_id": r.session_id, "due": r.due_at.astimezone(zone).strftime("%Y-%m-%d %H:%M"),
             "repeat": describe_rule(r.every), "text": r.text, "created_by": r.created_by} for r in pending]
    return console.render(request, "reminders.html", title="Reminders", rows=rows, zone=str(zone),
                          limit=REMINDERS_SHOWN)


async def weixin_page(request: web.Request) -> web.StreamResponse:
    """The WeChat (weixin) login QR code, when that channel is waiting for a scan."""
    console = console_of(request)
    channel = next((c for c in console.channels if c.name == "weixin"), None)
    qr = channel.login_qr if channel is not None else None
    if qr:
        return console.render(request, "weixin.html", title="WeChat login", qr=qr, question=channel.login_question,
                              wrong=request.query.get("wrong") == "1")
    if channel is None:
        message = ("The weixin channel (WeChat's official bot API) is not running in this bot, so there is no "
                   "login QR code to show. When it runs and needs a login, its QR code appears here.")
    else:
        message = "The weixin channel is logged in: there is no QR code to scan."
    return console.render(request, "placeholder.html", title="WeChat login", message=message)


async def weixin_code(request: web.Request) -> web.StreamResponse:
    """The number WeChat shows on the phone during the login (``need_verifycode``), handed to the channel."""
    console = console_of(request)
    channel = next((c for c in console.channels if c.name == "weixin"), None)
    code = str((await request.post()).get("code") or "").strip()
    if not code.isdigit() or len(code) > 16 or channel is None or not channel.answer_login(code):
        raise web.HTTPSeeOther("/weixin?wrong=1")
    raise web.HTTPSeeOther("/weixin")
