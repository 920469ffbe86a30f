"""AiohttpRequest against a real loopback HTTP server (aiohttp's own test server)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from telegram import InputFile
from telegram.error import NetworkError, TimedOut
from telegram.request import RequestData
from telegram.request._requestparameter import RequestParameter

from channels.telegram.channel import TelegramChannel
from channels.telegram.request import AiohttpRequest
from config.settings import Config


class Api:
    """Records requests; ``/slow`` answers after ``delay`` seconds, counting requests in flight."""

    def __init__(self) -> None:
        self.forms: list[dict[str, str]] = []
        self.files: list[tuple[str, str, bytes]] = []
        self.agents: list[str] = []
        self.paths: list[str] = []
        self.cookies: list[str | None] = []
        self.delay = 0.05
        self.in_flight = 0
        self.peak = 0

    async def method(self, request: web.Request) -> web.Response:
        self.agents.append(request.headers.get("User-Agent", ""))
        self.paths.append(request.path)
        self.cookies.append(request.headers.get("Cookie"))
        if request.content_type.startswith("multipart/"):
            form: dict[str, str] = {}
            async for part in await request.multipart():
                if part.filename:
                    self.files.append((part.name or "", part.filename, await part.read()))
                else:
                    form[part.name or ""] = await part.text()
            self.forms.append(form)
        else:
            self.forms.append(dict(await request.post()))
        response = web.json_response({"ok": True, "result": True})
        if request.path == "/setCookie":
            response.set_cookie("session", "abc")
        return response

    async def slow(self, request: web.Request) -> web.Response:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        return web.json_response({"ok": True, "result": True})


@pytest.fixture
async def server() -> AsyncIterator[tuple[TestServer, Api]]:
    api = Api()
    app = web.Application()
    app.router.add_post("/slow", api.slow)
    app.router.add_post("/{method}", api.method)
    srv = TestServer(app, host="127.0.0.1")
    await srv.start_server()
    try:
        yield srv, api
    finally:
        await srv.close()


def data(**fields: object) -> RequestData:
    """PTB's request data, as Bot methods build it."""
    return RequestData([RequestParameter.from_input(k, v) for k, v in fields.items()])


async def test_form_fields_arrive_as_ptb_encodes_them(server) -> None:
    srv, api = server
    request = AiohttpRequest()
    await request.initialize()
    try:
        status, body = await request.do_request(str(srv.make_url("/sendMessage")), "POST",
                                                data(chat_id=5, text="héllo", reply_parameters={"message_id": 1}))
    finally:
        await request.shutdown()
    assert (status, json.loads(body)) == (200, {"ok": True, "result": True})
    assert api.forms == [{"chat_id": "5", "text": "héllo", "reply_parameters": '{"message_id": 1}'}]
    assert api.agents[0].startswith("python-telegram-bot")


async def test_uploads_go_as_multipart(server) -> None:
    srv, api = server
    request = AiohttpRequest()
    await request.initialize()
    try:
        status, _ = await request.do_request(str(srv.make_url("/sendDocument")), "POST",
                                             data(chat_id=5, document=InputFile(b"%PDF-1", filename="a.pdf")))
    finally:
        await request.shutdown()
    assert status == 200
    assert api.forms[0]["chat_id"] == "5"
    assert api.files == [("document", "a.pdf", b"%PDF-1")]


async def test_requests_beyond_the_pool_wait_for_a_connection(server) -> None:
    srv, api = server
    request = AiohttpRequest(connection_pool_size=3)
    await request.initialize()
    try:
        results = await asyncio.gather(*(request.do_request(str(srv.make_url("/slow")), "POST") for _ in range(10)))
    finally:
        await request.shutdown()
    assert [status for status, _ in results] == [200] * 10
    assert api.peak == 3


async def test_a_slow_answer_is_a_timeout_and_a_closed_port_a_network_error(server) -> None:
    srv, api = server
    api.delay = 1.0
    request = AiohttpRequest(read_timeout=0.1)
    await request.initialize()
    try:
        with pytest.raises(TimedOut):
            await request.do_request(str(srv.make_url("/slow")), "POST")
        with pytest.raises(NetworkError, match="aiohttp"):
            await request.do_request("http://127.0.0.1:1/getMe", "POST")
    finally:
        await request.shutdown()


async def test_used_before_initialize_fails_clearly() -> None:
    with pytest.raises(RuntimeError, match="not initialized"):
        await AiohttpRequest().do_request("http://127.0.0.1:1/getMe", "POST")


async def test_proxy_settings_from_the_environment_apply(server, monkeypatch: pytest.MonkeyPatch) -> None:
    srv, api = server
    monkeypatch.setenv("HTTP_PROXY", str(srv.make_url("/")).rstrip("/"))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    request = AiohttpRequest()
    await request.initialize()
    try:
        # the host does not exist: only the proxy (our server) can answer
        status, _ = await request.do_request("http://api.telegram.invalid/sendMessage", "POST", data(chat_id=1))
    finally:
        await request.shutdown()
    assert status == 200
    assert api.forms == [{"chat_id": "1"}]


async def test_cookies_set_by_the_server_are_not_sent_back(server) -> None:
    srv, api = server
    request = AiohttpRequest()
    await request.initialize()
    # By name: aiohttp's default jar ignores cookies from bare IP addresses.
    base = f"http://localhost:{srv.port}"
    try:
        await request.do_request(f"{base}/setCookie", "POST")
        await request.do_request(f"{base}/getMe", "POST")
    finally:
        await request.shutdown()
    assert api.paths == ["/setCookie", "/getMe"]
    assert api.cookies == [None, None]  # the Bot API sets none; a jar would only cost time


async def test_a_per_call_timeout_applies_to_that_call_only(server) -> None:
    srv, api = server
    api.delay = 0.3
    request = AiohttpRequest(read_timeout=5)
    await request.initialize()
    try:
        url = str(srv.make_url("/slow"))
        with pytest.raises(TimedOut):
            await request.do_request(url, "POST", read_timeout=0.1)
        assert (await request.do_request(url, "POST"))[0] == 200  # the default again, not the cached 0.1 s
        with pytest.raises(TimedOut):
            await request.do_request(url, "POST", read_timeout=0.1)
    finally:
        await request.shutdown()


@pytest.mark.parametrize(("url", "proxy", "error"), [
    ("http://127.0.0.1:99999/getMe", None, "aiohttp.InvalidUrlClientError: http://127.0.0.1:99999/getMe"),
    ("ftp://example.com/getMe", None, "aiohttp.NonHttpUrlClientError: ftp://example.com/getMe"),
    ("http://api.telegram.invalid/getMe", "http://[bad", "aiohttp.InvalidURL: http://[bad"),
])
async def test_bad_urls_are_network_errors_as_aiohttp_reports_them(monkeypatch: pytest.MonkeyPatch, url: str,
                                                                   proxy: str | None, error: str) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    if proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy)
    request = AiohttpRequest()
    await request.initialize()
    try:
        for _ in range(2):  # and the same the second time
            with pytest.raises(NetworkError) as info:
                await request.do_request(url, "POST")
            assert str(info.value) == error
    finally:
        await request.shutdown()


@pytest.mark.parametrize(("turns", "pool"), [(64, 128), (200, 400), (8, 64)])
def test_the_channels_send_pool_holds_every_turns_reply_and_typing(turns: int, pool: int) -> None:
    """A turn may have its reply and its "typing…" in flight at once: the pool grows with the turns allowed."""
    cfg = Config(channel_type="telegram", telegram_bot_token="123:abc", max_concurrent_turns=turns)
    assert TelegramChannel(cfg)._build_bot().request.connection_pool_size == pool
