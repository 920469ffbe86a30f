"""The console's aiohttp server: start and stop, the access gate, and page rendering.

The app starts it after "ready" (``start_console``) and stops it first at shutdown, before the turns in
flight are drained. A console that cannot start (a port in use, a non-loopback address without a
password) is one log line; the chat channels keep running.

Cookies: the session cookie is set by a login only, and removed by a logout: a request that comes without
it (Chromium's own ``/favicon.ico`` request racing the token login, or a link followed from another site,
which SameSite=Strict sends without cookies) never gets a new one, so no page can log the admin out. A
visitor who is not logged in gets the login form's CSRF token under a cookie of its own.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import jinja2
from aiohttp import web

from console.auth import COOKIE, LOGIN_COOKIE, Access, ConsoleSession, SessionStore, csrf_ok, is_loopback

if TYPE_CHECKING:
    from channels.base import BaseChannel
    from dispatcher.commands import Services
    from dispatcher.leader import Leadership

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
CONSOLE: web.AppKey[WebConsole] = web.AppKey("console")
#: where a request keeps its console session (aiohttp 3.14 types request storage with RequestKey)
SESSION: Any = web.RequestKey("console_session", ConsoleSession) if hasattr(web, "RequestKey") else "console_session"
#: Pages anyone may open: the login form and the files it needs.
OPEN_PATHS = ("/login",)
FAVICON = HERE / "static" / "favicon.ico"
SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                                "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # the token link must not leak through a Referer header
    "Cache-Control": "no-store",
}
NAV = [("/", "Status"), ("/conversations", "Conversations"), ("/memory", "Memory"), ("/config", "Config"),
       ("/logs", "Logs"), ("/usage", "Usage"), ("/tools", "Tools"), ("/reminders", "Reminders"), ("/chat", "Chat"),
       ("/knowledge", "Knowledge"), ("/weixin", "WeChat login")]


class WebConsole:
    """The web console of one bot process."""

    def __init__(self, services: Services, channel_failures: dict[str, str] | None = None, *,
                 channels: list[BaseChannel] | None = None, leadership: Leadership | None = None,
                 pages: Sequence[Callable[[web.UrlDispatcher], None]] = ()) -> None:
        self.services = services
        #: each page module's ``add_routes`` (``console/site.py`` lists them; the pages import this module)
        self.pages = tuple(pages)
        self.channel_failures = channel_failures if channel_failures is not None else {}
        #: the running chat channels (their state on the status page; the WeChat login QR)
        self.channels: list[BaseChannel] = channels if channels is not None else []
        #: whether this process leads (several processes); None: it is alone
        self.leadership = leadership
        #: background work started by a page (re-indexing after a memory edit)
        self.tasks: set[asyncio.Task] = set()
        cfg = services.config()
        self.host = cfg.web_console_listen
        self.port = cfg.web_console_port
        self.loopback = is_loopback(self.host)
        self.access = Access(services.config, cfg.data_path())
        #: logged-in browsers (the session cookie)
        self.sessions = SessionStore()
        #: visitors on the login form (its CSRF token): kept apart, so they never push a logged-in session out
        self.visitors = SessionStore()
        self.templates = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                                            autoescape=True, trim_blocks=True, lstrip_blocks=True)
        self._runner: web.AppRunner | None = None
        self.bound_port: int | None = None
        #: set when the console stops: long-lived responses (the web chat's event streams) end at once
        self.closing = asyncio.Event()
        #: paths the login does not guard, each a test of the path (the public web chat, when a page adds it)
        self.public_paths: list[Callable[[str], bool]] = []

    # --- lifecycle -------------------------------------------------------------------------
    def refusal(self) -> str | None:
        """Why the console must not start with these settings, or None."""
        if not self.port:
            return None
        if not self.loopback and not self.access.password:
            return (f"web console not started: web_console_listen is {self.host}, which is not a loopback "
                    "address, and web_console_password is empty; set WEB_CONSOLE_PASSWORD (or the key in "
                    "config.json by hand) to serve it there")
        return None

    async def start(self) -> bool:
        """Serve the console; False (after one log line) when it is off or cannot start."""
        if not self.port:
            logger.info("web console: off (web_console_port is 0)")
            return False
        why = self.refusal()
        if why:
            logger.warning("%s", why)
            return False
        app = self.make_app()
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=5.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            if exc.errno == errno.EADDRINUSE:
                logger.warning("web console not started: port %d on %s is in use; set web_console_port to a free "
                               "port (0 turns the console off)", self.port, self.host)
            else:
                logger.warning("web console not started: cannot listen on %s:%d (%s)", self.host, self.port,
                               exc.strerror or exc)
            return False
        self._runner = runner
        sockets = getattr(site._server, "sockets", None) or []  # noqa: SLF001 - the port really bound
        self.bound_port = sockets[0].getsockname()[1] if sockets else self.port
        self.announce()
        return True

    def url(self) -> str:
        """The address to open (with the token when the token opens it)."""
        host = self.host if ":" not in self.host else f"[{self.host}]"
        base = f"http://{host}:{self.bound_port or self.port}/"
        return base + f"?token={quote(self.access.token)}" if self.access.mode == "token" else base

    def announce(self) -> None:
        """Say where the console is: in bot.log, and on an interactive terminal above the prompt."""
        how = "" if self.access.mode == "token" else " (log in with web_console_password)"
        self._say(f"web console: {self.url()}{how}")

    def _say(self, line: str, *, terminal: bool = True) -> None:
        """One line in bot.log, and on an interactive terminal above the prompt (INFO lines stay off it)."""
        logger.info("%s", line)
        if not terminal:
            return
        from channels.terminal import screen_is_ours

        if screen_is_ours(self.services.config()):  # INFO lines stay off such a terminal: show this one there
            print(line, file=sys.stdout, flush=True)  # noqa: T201 - the start banner's line

    def new_link(self, asked_by: str) -> str:
        """``/console``: a new one-time link (any unused one stops working), said in bot.log and on the terminal;
        the answer for the admin who asked."""
        if self._runner is None:
            return "The web console is not running (see bot.log for why)."
        if self.access.mode != "token":
            return (f"The web console is at {self.url()}: log in with web_console_password (links are only for a "
                    "console without a password).")
        self.access.renew()
        self._say(f"web console: new one-time link (asked by {asked_by}): {self.url()}",
                  terminal=not asked_by.startswith("terminal:"))  # asked there: the answer shows it
        return (f"Web console: {self.url()}\nThe link logs in one browser once, on the bot's machine (or through an "
                "SSH tunnel); it replaces any earlier link.")

    async def stop(self) -> None:
        """Stop serving; requests in progress get a moment to finish."""
        runner, self._runner = self._runner, None
        self.closing.set()
        if runner is not None:
            await runner.cleanup()
            logger.info("web console: stopped")

    # --- the aiohttp application -------------------------------------------------------------
    def make_app(self) -> web.Application:
        """The aiohttp application with every page."""
        app = web.Application(middlewares=[self._gate], client_max_size=1024 * 1024)
        app[CONSOLE] = self
        app.router.add_static("/static/", HERE / "static", name="static", append_version=True)
        app.router.add_get("/favicon.ico", favicon)
        for add_routes in self.pages:
            add_routes(app.router)
        return app

    @web.middleware
    async def _gate(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.loopback and self.access.mode == "token" and not is_loopback(_hostname(request.host)):
            # A page of another site whose name was rebound to 127.0.0.1 (DNS rebinding) is not let in.
            return web.Response(status=403, text="This console answers at a loopback address only "
                                                 "(http://127.0.0.1:PORT/); behind a proxy, set web_console_password.")
        if request.path.startswith("/static/") or request.path == "/favicon.ico":
            return await handler(request)  # files: no session, no cookie
        if any(test(request.path) for test in self.public_paths):
            # a public page checks its own visitors (the public web chat): no console session is made for them
            response = await handler(request)
            for name, value in SECURITY_HEADERS.items():
                response.headers.setdefault(name, value)
            return response
        session = self.sessions.get(request.cookies.get(COOKIE))
        visitor: ConsoleSession | None = None
        if session is None:  # not logged in: the login form's own session, never the session cookie
            session = self.visitors.get(request.cookies.get(LOGIN_COOKIE))
            if session is None:
                session = visitor = self.visitors.new()
        request[SESSION] = session
        try:
            response = await self._guarded(request, handler, session)
        except web.HTTPException as exc:  # a raised redirect or 404 gets the same headers
            for name, value in SECURITY_HEADERS.items():
                exc.headers.setdefault(name, value)
            if visitor is not None:
                self.visitors.drop(visitor.id)
            raise
        if visitor is not None:
            if request[SESSION] is visitor and not 300 <= response.status < 400:
                set_cookie(request, response, visitor, LOGIN_COOKIE)  # a page with a form: its CSRF token
            else:
                self.visitors.drop(visitor.id)  # a redirect, or logged in: nobody holds it
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    async def _guarded(self, request: web.Request, handler: Any, session: ConsoleSession) -> web.StreamResponse:
        token = request.query.get("token")
        if token is not None and request.method == "GET":
            if session.authed:  # logged in already: the link is not needed (and stays unused)
                query = {k: v for k, v in request.query.items() if k != "token"}
                return redirect(str(request.rel_url.with_query(query)))
            return self._token_login(request, token)
        if request.method == "POST":
            form = await request.post()
            if not csrf_ok(session, form.get("csrf")):
                logger.warning("web console: %s %s refused: missing or wrong CSRF token", request.method, request.path)
                return self.render(request, "message.html", status=403, title="Refused",
                                   message="This form was refused: its security token is missing or out of date. "
                                           "Nothing was changed. Reload the page and try again.")
        if not session.authed and request.path not in OPEN_PATHS:
            if request.method != "GET":
                raise web.HTTPSeeOther("/login")
            return redirect("/login?next=" + quote(request.path_qs, safe=""))
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except Exception:
            logger.exception("web console: %s %s failed", request.method, request.path)
            return self.render(request, "message.html", status=500, title="Something went wrong",
                               message="The page could not be shown; the details are in bot.log.")

    def _token_login(self, request: web.Request, token: str) -> web.StreamResponse:
        """``/?token=…``: log in with the start token, then drop it from the address bar."""
        if self.access.mode != "token" or not self.loopback:
            return redirect("/login")
        error = self.access.attempt(request.remote or "?", token)
        if error is not None:
            return self.render(request, "login.html", status=403, error=error, next="/")
        query = {k: v for k, v in request.query.items() if k != "token"}
        target = request.rel_url.with_query(query)
        return self.log_in(request, str(target))

    def log_in(self, request: web.Request, target: str) -> web.StreamResponse:
        """Replace the visitor's session with a new logged-in one and go to ``target``."""
        old: ConsoleSession = request[SESSION]
        self.visitors.drop(old.id)
        self.sessions.drop(old.id)
        session = self.sessions.new(authed=True)
        request[SESSION] = session
        response = redirect(target)
        set_cookie(request, response, session)
        response.del_cookie(LOGIN_COOKIE, path="/")
        return response

    def log_out(self, request: web.Request) -> web.StreamResponse:
        """End the session and remove its cookie; back to the login form."""
        self.sessions.drop(request[SESSION].id)
        response = redirect("/login")
        response.del_cookie(COOKIE, path="/")
        return response

    def redactor(self) -> Any:
        """Masks the secrets in force now, and the start token, as the log file masks secrets."""
        from config.redact import Redactor

        redact = Redactor()
        redact.update(self.services.config())
        redact.secrets = sorted({*redact.secrets, *self.access.issued}, key=len, reverse=True)
        return redact

    # --- rendering ---------------------------------------------------------------------------
    def render(self, request: web.Request, template: str, status: int = 200, **context: Any) -> web.Response:
        """A page from ``templates/``, with the navigation and the session's CSRF token."""
        page, values = self._page(request, template, context)
        return _html(page.render(**values), status)

    async def render_off_loop(self, request: web.Request, template: str, status: int = 200,
                              **context: Any) -> web.Response:
        """:meth:`render` in a worker thread, for a long page (a transcript of thousands of messages)."""
        page, values = self._page(request, template, context)
        return _html(await asyncio.to_thread(page.render, **values), status)

    def _page(self, request: web.Request, template: str, context: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        session: ConsoleSession | None = request.get(SESSION)
        router = request.app.router
        values = {"nav": NAV, "path": request.path, "csrf": session.csrf if session else "",
                  "authed": bool(session and session.authed), "mode": self.access.mode,
                  "static": lambda name: router["static"].url_for(filename=name), **context}
        return self.templates.get_template(template), values


def _html(text: str, status: int) -> web.Response:
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")


def _hostname(host: str) -> str:
    """The name in a Host header, without its port (``[::1]:8700`` -> ``::1``)."""
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def redirect(location: str) -> web.Response:
    """A 303 to ``location`` (returned, so the gate can still set the cookie and headers on it)."""
    return web.Response(status=303, headers={"Location": location})


def set_cookie(request: web.Request, response: web.StreamResponse, session: ConsoleSession,
               name: str = COOKIE) -> None:
    """The session cookie (or the login form's): HttpOnly, SameSite=Strict, Secure behind TLS."""
    secure = request.secure or request.headers.get("X-Forwarded-Proto", "").lower() == "https"
    response.set_cookie(name, session.id, httponly=True, samesite="Strict", secure=secure, path="/")


async def favicon(request: web.Request) -> web.StreamResponse:
    """``/favicon.ico``, which browsers ask for on their own (with no session and no cookie)."""
    return web.FileResponse(FAVICON, headers={"Content-Type": "image/x-icon", "Cache-Control": "max-age=86400",
                                              "X-Content-Type-Options": "nosniff"})


def console_of(request: web.Request) -> WebConsole:
    """The console serving ``request``."""
    return request.app[CONSOLE]
