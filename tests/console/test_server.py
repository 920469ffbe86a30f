"""console/server.py: when the console starts, and that a console that cannot start leaves the chat running."""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from config.settings import Config, ConfigHolder
from console.server import WebConsole
from console.site import web_console
from tests.console.conftest import free_port


@dataclass
class Parts:
    """What the console needs before it serves a page: the settings."""

    config: ConfigHolder


def console_for(tmp_path: Path, **settings: Any) -> WebConsole:
    return web_console(Parts(ConfigHolder(Config(data_dir=str(tmp_path), **settings))))


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name == "console.server"]


def test_by_default_the_console_is_on_loopback_port_8700_opened_by_the_token(tmp_path: Path) -> None:
    console = WebConsole(Parts(ConfigHolder(Config(data_dir=str(tmp_path)))))
    assert (console.host, console.port, console.loopback, console.access.mode) == ("127.0.0.1", 8700, True, "token")
    assert console.refusal() is None
    assert console.url() == f"http://127.0.0.1:8700/?token={console.access.token}"


async def test_port_zero_turns_the_console_off(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    console = console_for(tmp_path, web_console_port=0)
    assert await console.start() is False
    assert [r.getMessage() for r in caplog.records if r.name == "console.server"] == [
        "web console: off (web_console_port is 0)"]


async def test_another_address_without_a_password_is_one_line_and_no_console(tmp_path: Path,
                                                                             caplog: pytest.LogCaptureFixture) -> None:
    console = console_for(tmp_path, web_console_listen="0.0.0.0", web_console_port=free_port())
    assert await console.start() is False
    assert warnings(caplog) == [
        "web console not started: web_console_listen is 0.0.0.0, which is not a loopback address, and "
        "web_console_password is empty; set WEB_CONSOLE_PASSWORD (or the key in config.json by hand) to serve it "
        "there"]
    with_password = console_for(tmp_path, web_console_listen="0.0.0.0", web_console_password="long-password-1")
    assert with_password.refusal() is None
    assert with_password.url().endswith(":8700/")  # no token in the address: the password opens it


async def test_a_port_in_use_is_one_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        console = console_for(tmp_path, web_console_port=port)
        assert await console.start() is False
    assert warnings(caplog) == [f"web console not started: port {port} on 127.0.0.1 is in use; set "
                                "web_console_port to a free port (0 turns the console off)"]


async def test_the_console_serves_and_stops(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import aiohttp

    caplog.set_level(logging.INFO)
    console = console_for(tmp_path, web_console_port=free_port())
    assert await console.start() is True
    try:
        url = console.url()
        assert f"?token={console.access.token}" in url
        assert [r.getMessage() for r in caplog.records if r.name == "console.server"] == [f"web console: {url}"]
        async with aiohttp.ClientSession() as http:
            async with http.get(url.split("?")[0] + "conversations", allow_redirects=False) as response:
                assert response.status == 303
                assert response.headers["Location"] == "/login?next=%2Fconversations"
                assert "Set-Cookie" not in response.headers  # only a login sets the session cookie
                assert response.headers["X-Frame-Options"] == "DENY"
            async with http.get(url.split("?")[0] + "login", allow_redirects=False) as response:
                cookie = response.headers["Set-Cookie"]  # the login form's own cookie, for its CSRF token
                assert cookie.startswith("console_login=") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
            # a page of another site rebound to 127.0.0.1 (DNS rebinding) is not let in, whatever it sends
            async with http.get(url, headers={"Host": f"evil.example:{console.bound_port}"}) as response:
                assert response.status == 403
                assert "loopback address only" in await response.text()
            async with http.get(url.split("?")[0] + "login", headers={"Host": "localhost"}) as response:
                assert response.status == 200
            # a POST without the visitor's CSRF token is refused before anything else
            async with http.post(url.split("?")[0] + "login", data={"secret": console.access.token}) as response:
                assert response.status == 403
                assert "This form was refused" in await response.text()
    finally:
        await console.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", console.bound_port or 0), timeout=1).close()


@dataclass
class WaitingWeixin:
    """A weixin channel waiting for a scan: ``login_qr`` is the code as a data: URL (or text to show as is)."""

    name: str = "weixin"
    failure: str | None = None
    login_qr: str | None = "data:image/png;base64,iVBORw0KGgo="
    login_question: str | None = None


async def test_the_weixin_login_code_is_shown_while_the_channel_waits_for_a_scan(tmp_path: Path) -> None:
    import aiohttp

    channel = WaitingWeixin()
    parts = Parts(ConfigHolder(Config(data_dir=str(tmp_path), web_console_port=free_port())))
    console = web_console(parts, channels=[channel])
    assert await console.start() is True
    try:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            async with http.get(console.url(), allow_redirects=False) as response:  # the token logs in
                assert response.status == 303 and response.headers["Location"] == "/"
            async with http.get(console.url().split("?")[0] + "weixin") as response:
                page = await response.text()
                assert response.status == 200
                assert '<img src="data:image/png;base64,iVBORw0KGgo=" alt="WeChat login QR code">' in page
            channel.login_qr = None  # logged in
            async with http.get(console.url().split("?")[0] + "weixin") as response:
                assert "is logged in: there is no QR code to scan" in await response.text()
    finally:
        await console.stop()


def set_cookies(response: Any) -> dict[str, str]:
    """The cookies a response sets, by name (a removal is an empty value)."""
    return {morsel.key: morsel.value for morsel in response.cookies.values()}


async def test_a_request_without_the_session_cookie_never_replaces_it(tmp_path: Path) -> None:
    """The token login races Chromium's own /favicon.ico request, which still carries the cookie of before the
    login (or none), and a link from another site comes without cookies (SameSite=Strict): neither may get a
    session cookie that overwrites the logged-in one. In this order, deterministically."""
    import aiohttp

    console = console_for(tmp_path, web_console_port=free_port())
    assert await console.start() is True
    base = console.url().split("?")[0]
    try:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
            async with http.get(base + "login") as response:  # before the login: the login form's cookie only
                before = set_cookies(response)
                assert list(before) == ["console_login"]
            old = f"console_login={before['console_login']}"
            async with http.get(console.url(), headers={"Cookie": old}, allow_redirects=False) as response:
                assert response.status == 303 and response.headers["Location"] == "/"
                logged_in = set_cookies(response)
                assert logged_in["console_login"] == "" and logged_in["console_session"]
            session = f"console_session={logged_in['console_session']}"
            for cookie in (old, ""):  # the favicon request of before the login; a link from another site
                async with http.get(base + "favicon.ico", headers={"Cookie": cookie} if cookie else None,
                                    allow_redirects=False) as response:
                    assert response.status == 200 and response.content_type == "image/x-icon"
                    assert (await response.read()).startswith(b"\x00\x00\x01\x00")  # an ICO file
                    assert set_cookies(response) == {}
                async with http.get(base + "conversations", headers={"Cookie": cookie} if cookie else None,
                                    allow_redirects=False) as response:
                    assert response.status == 303  # to the login form: this request is not logged in
                    assert "console_session" not in set_cookies(response)
            async with http.get(base + "weixin", headers={"Cookie": session}, allow_redirects=False) as response:
                assert response.status == 200  # still logged in
                assert "console_session" not in set_cookies(response)
            async with http.post(base + "logout", headers={"Cookie": session}, allow_redirects=False) as response:
                assert response.status == 403  # the form's CSRF token is missing: refused, still logged in
            async with http.get(base + "weixin", headers={"Cookie": session}, allow_redirects=False) as response:
                assert response.status == 200
    finally:
        await console.stop()


async def test_console_makes_a_new_one_time_link_and_says_it_in_the_log(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    console = console_for(tmp_path, web_console_port=free_port())
    assert console.new_link("telegram:7") == "The web console is not running (see bot.log for why)."
    assert await console.start() is True
    try:
        first = console.access.token
        answer = console.new_link("telegram:7")
        assert console.access.token != first
        assert answer == (f"Web console: {console.url()}\nThe link logs in one browser once, on the bot's machine (or "
                          "through an SSH tunnel); it replaces any earlier link.")
        assert f"web console: new one-time link (asked by telegram:7): {console.url()}" in caplog.messages
        assert first in console.redactor().secrets and console.access.token in console.redactor().secrets
    finally:
        await console.stop()
    with_password = console_for(tmp_path, web_console_port=free_port(), web_console_password="long-password-1")
    assert await with_password.start() is True
    try:
        assert with_password.new_link("terminal:me").startswith("The web console is at http://127.0.0.1:")
    finally:
        await with_password.stop()
@dataclass
class AskingWeixin(WaitingWeixin):
    """A weixin channel whose login waits for the number the phone shows."""

    login_question: str | None = "WeChat shows a number on the phone. Type it here to connect the bot."
    entered: list[str] | None = None

    def answer_login(self, answer: str) -> bool:
        if self.login_question is None:
            return False
        self.entered = [*(self.entered or []), answer]
        self.login_question = None
        return True


async def test_the_number_the_phone_shows_is_asked_for_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    import re

    import aiohttp

    channel = AskingWeixin()
    parts = Parts(ConfigHolder(Config(data_dir=str(tmp_path), web_console_port=free_port())))
    console = web_console(parts, channels=[channel])
    assert await console.start() is True
    base = console.url().split("?")[0]
    try:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            async with http.get(console.url(), allow_redirects=False):
                pass
            async with http.get(base + "weixin") as response:
                page = await response.text()
            assert 'action="/weixin/code"' in page and "WeChat shows a number on the phone" in page
            csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
            for bad in ("12a4", "", "1" * 17):
                async with http.post(base + "weixin/code", data={"csrf": csrf, "code": bad},
                                     allow_redirects=False) as response:
                    assert response.status == 303 and response.headers["Location"] == "/weixin?wrong=1"
            async with http.post(base + "weixin/code", data={"code": "482913"}) as response:
                assert response.status == 403  # no CSRF token: refused before the channel hears of it
            async with http.post(base + "weixin/code", data={"csrf": csrf, "code": " 482913 "},
                                 allow_redirects=False) as response:
                assert response.status == 303 and response.headers["Location"] == "/weixin"
            assert channel.entered == ["482913"]
            async with http.post(base + "weixin/code", data={"csrf": csrf, "code": "482913"},
                                 allow_redirects=False) as response:  # no longer asked for
                assert response.headers["Location"] == "/weixin?wrong=1"
            async with http.get(base + "weixin") as response:
                assert 'action="/weixin/code"' not in await response.text()
    finally:
        await console.stop()
