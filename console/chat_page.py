"""The web chat's pages (DESIGN §5, issue 45), mounted on the console's server: ``/chat`` for the operator
(behind the console's login) and, with ``web_chat_public``, ``/chat/public`` for anyone with the link.

The channel (``channels/web``) takes the messages and publishes the answers; this module is the HTTP side:
the page, the history from the database, the form post, and the Server-Sent Events stream. A public visitor is
a random id in a signed cookie (``channels/web/visitors.py``), their session ``web:<visitor id>``, their form
token derived from it; they may send ``web_chat_rate_per_minute`` messages a minute, and the usage caps of
DESIGN §12 apply to them as to anyone (the operator is an admin, so exempt).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import re
import secrets
import weakref
from typing import TYPE_CHECKING, Any

from aiohttp import web

from channels.web.channel import MAX_MESSAGE_CHARS, WebChannel
from channels.web.render import render_markdown
from channels.web.visitors import OPERATOR_ID, VisitorSigner, new_visitor
from console.server import SESSION, console_of
from core.turns import content_text
from store.shared_values import SharedValues

if TYPE_CHECKING:
    from console.server import WebConsole

logger = logging.getLogger(__name__)

PUBLIC = "/chat/public"
#: the public visitor's cookie (path ``/chat/public``, HttpOnly, SameSite=Strict)
VISITOR_COOKIE = "web_chat_visitor"
#: the shared value that keeps the signing key of visitor cookies
KEY_NAME = "web_chat_key"
#: messages shown on the page at most (the last ones)
HISTORY_LIMIT = 200
#: a comment line is sent this often on an idle stream, so proxies keep it open
KEEPALIVE_SECONDS = 15.0
CLIENT_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def add_routes(router: web.UrlDispatcher) -> None:
    """Register the chat pages: the operator's and the public one (answered only with ``web_chat_public``)."""
    for base, public in (("/chat", False), (PUBLIC, True)):
        router.add_get(base, _page(public))
        router.add_get(base + "/history", _history(public))
        router.add_post(base + "/send", _send(public))
        router.add_get(base + "/events", _events(public))


def public_path(path: str) -> bool:
    """True for the public chat's paths, which the console's login does not guard (the handlers check that
    ``web_chat_public`` is on)."""
    return path == PUBLIC or path.startswith(PUBLIC + "/")


#: each console's signer of visitor cookies, made at its first use (its key read from the database once)
_SIGNERS: weakref.WeakKeyDictionary[WebConsole, VisitorSigner] = weakref.WeakKeyDictionary()


def _channel(console: WebConsole) -> WebChannel | None:
    return next((c for c in console.channels if isinstance(c, WebChannel)), None)


async def _signer(console: WebConsole) -> VisitorSigner:
    """The signer of visitor cookies, its key shared by every process through the database."""
    signer = _SIGNERS.get(console)
    if signer is None:
        key = await SharedValues(console.services.store).setdefault(KEY_NAME, secrets.token_hex(32))
        signer = _SIGNERS.setdefault(console, VisitorSigner(key.encode()))
    return signer


class _Who:
    """Who is chatting: the operator, or a public visitor (and whether a cookie must be set for them)."""

    def __init__(self, visitor: str, operator: bool, form_token: str, new_cookie: str | None = None) -> None:
        self.visitor = visitor
        self.operator = operator
        self.form_token = form_token
        self.new_cookie = new_cookie


def _json_error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


async def _who(request: web.Request, public: bool, *, create: bool = False) -> _Who | web.Response:
    console = console_of(request)
    if not public:  # the console's gate let only a logged-in operator through
        return _Who(OPERATOR_ID, True, request[SESSION].csrf)
    if not console.services.config().web_chat_public:
        raise web.HTTPNotFound(text="The public web chat is off (web_chat_public).")
    signer = await _signer(console)
    visitor = signer.visitor(request.cookies.get(VISITOR_COOKIE))
    if visitor is not None:
        return _Who(visitor, False, signer.form_token(visitor))
    if not create:
        return _json_error(403, "This page has expired: reload it to chat again.")
    visitor = new_visitor()
    return _Who(visitor, False, signer.form_token(visitor), new_cookie=signer.cookie(visitor))


def _set_cookie(request: web.Request, response: web.StreamResponse, value: str) -> None:
    secure = request.secure or request.headers.get("X-Forwarded-Proto", "").lower() == "https"
    response.set_cookie(VISITOR_COOKIE, value, httponly=True, samesite="Strict", secure=secure, path=PUBLIC,
                        max_age=365 * 24 * 3600)


async def _messages(console: WebConsole, visitor: str) -> list[dict[str, str]]:
    """The visitor's conversation as the page shows it: user texts and the assistant's answers, oldest first."""
    rows = await console.services.store.sessions.last_messages(f"web:{visitor}", HISTORY_LIMIT)
    shown = []
    for _seq, message, _at in rows:
        role = message.get("role")
        if role not in ("user", "assistant"):
            continue
        text = content_text(message.get("content")).strip()
        if not text:
            continue  # an assistant step that only called tools
        item = {"role": role, "text": text}
        if role == "assistant":
            item["html"] = render_markdown(text)
        shown.append(item)
    return shown


def _page(public: bool):
    async def page(request: web.Request) -> web.StreamResponse:
        console = console_of(request)
        channel = _channel(console)
        if channel is None:
            if public:
                raise web.HTTPNotFound(text="The web chat is not running.")
            return console.render(request, "placeholder.html", title="Chat",
                                  message='The web chat is off: add "web" to channel_type (e.g. '
                                          '["telegram", "web"]) and restart, then chat with the bot here.')
        who = await _who(request, public, create=True)
        assert isinstance(who, _Who)
        base = PUBLIC if public else "/chat"
        response = console.render(request, "chat.html", title="Chat", base=base, form_token=who.form_token,
                                  history=await _messages(console, who.visitor), public=public,
                                  limit=MAX_MESSAGE_CHARS)
        if who.new_cookie is not None:
            _set_cookie(request, response, who.new_cookie)
        return response
    return page


def _history(public: bool):
    async def history(request: web.Request) -> web.StreamResponse:
        console = console_of(request)
        who = await _who(request, public)
        if isinstance(who, web.Response):
            return who
        return web.json_response({"messages": await _messages(console, who.visitor)})
    return history


def _wants_json(request: web.Request) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def _send(public: bool):
    async def send(request: web.Request) -> web.StreamResponse:
        console = console_of(request)
        channel = _channel(console)
        if channel is None or not channel.running:
            return _json_error(503, "The web chat is not running now; try again in a moment.")
        who = await _who(request, public)
        if isinstance(who, web.Response):
            return who
        form = await request.post()
        if public and not (await _signer(console)).form_ok(who.visitor, form.get("csrf")):
            return _json_error(403, "This page has expired: reload it to chat again.")
        text = str(form.get("text") or "").strip()
        if not text:
            return _json_error(400, "Type a message first.")
        if len(text) > MAX_MESSAGE_CHARS:
            return _json_error(400, f"That message is too long ({len(text):,} characters; at most "
                                    f"{MAX_MESSAGE_CHARS:,}). Nothing was sent.")
        client = str(form.get("client") or "")
        if not CLIENT_ID.match(client):
            client = secrets.token_hex(8)
        if public:
            per_minute = console.services.config().web_chat_rate_per_minute
            wait = channel.rate.take(who.visitor, per_minute)
            if wait > 0:
                return _json_error(429, f"You are sending messages too fast: at most {per_minute} a minute. "
                                        f"Try again in {math.ceil(wait)} s. This message was not sent.")
        if not await channel.receive(who.visitor, text, client, operator=who.operator):
            return _json_error(503, "Your message could not be saved (the bot's database is away); "
                                    "nothing was sent. Try again in a moment.")
        if not _wants_json(request):  # the page without JavaScript: back to it (the answer shows on reload)
            raise web.HTTPSeeOther(PUBLIC if public else "/chat")
        return web.json_response({"ok": True, "client": client})
    return send


def _sse(event: dict[str, Any], name: str = "message") -> bytes:
    head = f"id: {event['id']}\n" if "id" in event else ""
    return f"{head}event: {name}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n".encode()


def _events(public: bool):
    async def events(request: web.Request) -> web.StreamResponse:
        console = console_of(request)
        channel = _channel(console)
        if channel is None:
            return _json_error(404, "The web chat is not running.")
        who = await _who(request, public)
        if isinstance(who, web.Response):
            return who
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store",
                                               "X-Accel-Buffering": "no"})
        sub, missed, resumed = channel.hub.subscribe(who.visitor, request.headers.get("Last-Event-ID"))
        closing = asyncio.ensure_future(console.closing.wait())
        try:
            await response.prepare(request)
            await response.write(b"retry: 1000\n\n")  # after a restart, the page is back within a second or so
            await response.write(_sse({"resumed": resumed}, "hello"))
            for event in missed:
                await response.write(_sse(event))
            while True:
                getter = asyncio.ensure_future(sub.queue.get())
                done, _ = await asyncio.wait({getter, closing}, timeout=KEEPALIVE_SECONDS,
                                             return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    if closing in done:
                        break
                    await response.write(b": keepalive\n\n")
                    continue
                event = getter.result()
                if event is None:
                    break
                await response.write(_sse(event, "typing" if event.get("kind") == "typing" else "message"))
        except ConnectionResetError:
            pass  # the page went away
        finally:
            closing.cancel()
            channel.hub.unsubscribe(sub)
        with contextlib.suppress(Exception):
            await response.write_eof()
        return response
    return events
