"""Tests for agent/tools/web_fetch.py against a local HTTP server on 127.0.0.1 and a recording transport."""

from __future__ import annotations

import asyncio
import ipaddress
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from agent.tools.base import ToolContext
from agent.tools.web_fetch import (
    MAX_BYTES,
    WEB_FETCH,
    WebFetchError,
    fetch_page,
    html_to_text,
    is_public_address,
    page_to_text,
    web_fetch,
)
from config.settings import Config

PAGE = (b"<!DOCTYPE html><html><head><title>Test   Page</title><style>body{color:red}</style>"
        b"<script>var secret = 'script-text';</script></head><body><nav><a href='/'>Home menu</a></nav>"
        b"<h1>Hello</h1><p>First   paragraph\n with <a href='/x'>a link</a>.</p><ul><li>one</li><li>two</li></ul>"
        b"<noscript>enable js</noscript><script>alert('x')</script><h2>More</h2><!-- a comment -->"
        b"<p>Last<br>line</p></body></html>")
PAGE_TEXT = "# Hello\n\nFirst paragraph with a link.\n\n- one\n- two\n\n## More\n\nLast\nline"


@dataclass
class Route:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


class LocalServer:
    """A stdlib HTTP server on 127.0.0.1 serving fixed routes and recording what it was asked."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[tuple[str, str]] = []  # (path, Host header)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - stdlib name
                server.requests.append((self.path, self.headers.get("Host", "")))
                route = server.routes.get(self.path, Route(404, {"Content-Type": "text/plain"}, b"not found"))
                try:
                    self.send_response(route.status)
                    for name, value in route.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(route.body)))
                    self.end_headers()
                    self.wfile.write(route.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading (the 2 MB cap)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture
def server() -> Iterator[LocalServer]:
    srv = LocalServer()
    srv.thread.start()
    try:
        yield srv
    finally:
        srv.httpd.shutdown()
        srv.httpd.server_close()
        srv.thread.join(5)


class RecordingTransport(httpx.AsyncBaseTransport):
    """Answers every request with one fixed response, and records the requests."""

    def __init__(self, response: httpx.Response | None = None, delay: float = 0.0) -> None:
        self.requests: list[httpx.Request] = []
        self.response = response or httpx.Response(200, headers={"Content-Type": "text/plain"}, content=b"hi")
        self.delay = delay

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.delay:
            await asyncio.sleep(self.delay)
        return httpx.Response(self.response.status_code, headers=self.response.headers,
                              content=self.response.content)


def ctx(allow_private: bool = False) -> ToolContext:
    return ToolContext(session_id="telegram:1", config=Config(web_fetch_allow_private=allow_private),
                       data_dir=Path("."))


def fixed_resolver(answers: dict[str, list[str]]):
    async def resolve(host: str, port: int) -> list[str]:
        return answers[host]
    return resolve


def only(*allowed: str):
    ips = {ipaddress.ip_address(a) for a in allowed}
    return lambda ip: ip in ips


# --- address policy --------------------------------------------------------------------------------

@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8",
                                     "2002:0808:0808::1"])
def test_public_addresses(address: str) -> None:
    assert is_public_address(ipaddress.ip_address(address)) is True


@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.8.9.10", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254", "0.0.0.0",
    "224.0.0.1", "240.0.0.1", "255.255.255.255", "100.64.0.1", "192.0.2.1", "198.18.0.1",
    "::1", "::", "fe80::1", "fc00::1", "fd12:3456::1", "ff02::1", "fec0::1", "2001:db8::1",
    "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "2002:7f00:1::1", "64:ff9b::7f00:1",
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo whose client is 127.0.0.1
])
def test_non_public_addresses(address: str) -> None:
    assert is_public_address(ipaddress.ip_address(address)) is False


# --- refusals by default ---------------------------------------------------------------------------

async def test_tool_refuses_private_targets_by_default_without_connecting(server: LocalServer) -> None:
    server.routes["/"] = Route(200, {"Content-Type": "text/plain"}, b"secret")
    urls = {
        server.url("/"): "127.0.0.1",
        "http://10.0.0.1/": "10.0.0.1",
        f"http://[::1]:{server.port}/": "::1",
        "http://169.254.169.254/latest/meta-data/": "169.254.169.254",
        f"http://localhost:{server.port}/": "127.0.0.1",
    }
    for url, ip in urls.items():
        with pytest.raises(WebFetchError) as info:
            await web_fetch.call(ctx(), {"url": url})
        assert f"resolves to {ip}, a loopback, private or otherwise non-public address" in str(info.value)
        assert "set web_fetch_allow_private to allow it" in str(info.value)
    assert server.requests == []


@pytest.mark.parametrize("url", ["http://127.0.0.1/", "http://10.0.0.1/", "http://[::1]/", "http://169.254.169.254/",
                                 "http://[::ffff:127.0.0.1]/", "http://0.0.0.0/", "http://2130706433/"])
async def test_refusal_sends_no_request(url: str) -> None:
    transport = RecordingTransport()
    with pytest.raises(WebFetchError, match="non-public address"):
        await fetch_page(url, transport=transport)
    assert transport.requests == []


async def test_any_non_public_resolved_address_refuses() -> None:
    transport = RecordingTransport()
    resolver = fixed_resolver({"mixed.test": ["93.184.216.34", "10.1.2.3"]})
    with pytest.raises(WebFetchError, match=r"mixed.test resolves to 10\.1\.2\.3"):
        await fetch_page("http://mixed.test/", resolver=resolver, transport=transport)
    assert transport.requests == []


@pytest.mark.parametrize(("url", "scheme"), [("ftp://example.com/file", "ftp"), ("file:///etc/passwd", "file"),
                                             ("javascript:alert(1)", "javascript"), ("example.com/page", "a relative")])
async def test_non_http_schemes_refused(url: str, scheme: str) -> None:
    with pytest.raises(WebFetchError) as info:
        await web_fetch.call(ctx(allow_private=True), {"url": url})
    assert str(info.value) == f"only http and https URLs can be fetched, not {scheme!r} URLs"


# --- pinning to the vetted address ---------------------------------------------------------------------

async def test_request_goes_to_the_vetted_ip_with_original_host_and_sni() -> None:
    transport = RecordingTransport()
    resolver = fixed_resolver({"example.test": ["93.184.216.34", "2606:2800:220:1::248"]})
    page = await fetch_page("https://example.test/a?b=1", resolver=resolver, transport=transport)
    (request,) = transport.requests
    assert str(request.url) == "https://93.184.216.34/a?b=1"
    assert request.headers["Host"] == "example.test"
    assert request.extensions["sni_hostname"] == "example.test"
    assert page.url == "https://example.test/a?b=1"
    assert page.body == b"hi"


async def test_pinned_fetch_reaches_local_server_with_original_host(server: LocalServer) -> None:
    server.routes["/p"] = Route(200, {"Content-Type": "text/plain; charset=utf-8"}, "héllo".encode())
    resolver = fixed_resolver({"example.test": ["127.0.0.1"]})
    page = await fetch_page(f"http://example.test:{server.port}/p", resolver=resolver,
                            address_allowed=only("127.0.0.1"))
    assert server.requests == [("/p", f"example.test:{server.port}")]
    assert page_to_text(page) == f"Title: (none)\nURL: http://example.test:{server.port}/p\n\nhéllo"


# --- redirects ---------------------------------------------------------------------------------------

async def test_redirect_to_private_address_is_refused(server: LocalServer) -> None:
    server.routes["/start"] = Route(302, {"Location": "/secret"})
    server.routes["/secret"] = Route(200, {"Content-Type": "text/plain"}, b"internal data")
    checks: list[str] = []

    def public_once(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        checks.append(str(ip))
        return len(checks) == 1  # 127.0.0.1 counts as public for the first hop only

    with pytest.raises(WebFetchError, match=r"refusing to fetch http://127\.0\.0\.1:\d+/secret"):
        await fetch_page(server.url("/start"), address_allowed=public_once)
    assert checks == ["127.0.0.1", "127.0.0.1"]
    assert [path for path, _ in server.requests] == ["/start"]


async def test_redirect_to_metadata_host_is_refused(server: LocalServer) -> None:
    server.routes["/start"] = Route(301, {"Location": "http://169.254.169.254/latest/meta-data/"})
    with pytest.raises(WebFetchError, match="resolves to 169.254.169.254"):
        await fetch_page(server.url("/start"), address_allowed=only("127.0.0.1"))
    assert [path for path, _ in server.requests] == ["/start"]


async def test_redirect_to_other_scheme_is_refused(server: LocalServer) -> None:
    server.routes["/start"] = Route(302, {"Location": "file:///etc/passwd"})
    with pytest.raises(WebFetchError, match="only http and https"):
        await fetch_page(server.url("/start"), allow_private=True)


async def test_redirects_followed_up_to_five(server: LocalServer) -> None:
    for i in range(5):
        server.routes[f"/r{i}"] = Route(302, {"Location": f"/r{i + 1}"})
    server.routes["/r5"] = Route(200, {"Content-Type": "text/plain"}, b"arrived")
    out = await web_fetch.call(ctx(allow_private=True), {"url": server.url("/r0")})
    assert out == f"Title: (none)\nURL: {server.url('/r5')}\n\narrived"
    server.routes["/r5"] = Route(302, {"Location": "/r6"})
    server.requests.clear()
    with pytest.raises(WebFetchError, match="too many redirects"):
        await web_fetch.call(ctx(allow_private=True), {"url": server.url("/r0")})
    assert len(server.requests) == 6


# --- content -----------------------------------------------------------------------------------------

async def test_allow_private_fetches_local_html_as_text(server: LocalServer) -> None:
    server.routes["/page"] = Route(200, {"Content-Type": "text/html; charset=utf-8"}, PAGE)
    out = await web_fetch.call(ctx(allow_private=True), {"url": server.url("/page")})
    assert out == f"Title: Test Page\nURL: {server.url('/page')}\n\n{PAGE_TEXT}"
    assert "script-text" not in out and "alert" not in out and "Home menu" not in out and "enable js" not in out


def test_html_to_text_charset_from_meta_and_header() -> None:
    html = "<html><head><meta charset='gbk'><title>标题</title></head><body><p>你好，世界</p></body></html>"
    assert html_to_text(html.encode("gbk")) == ("标题", "你好，世界")
    assert html_to_text(html.encode("gbk"), "gbk") == ("标题", "你好，世界")
    assert html_to_text(b"just words, no markup") == ("", "just words, no markup")


async def test_other_text_types_returned_as_is(server: LocalServer) -> None:
    server.routes["/data.json"] = Route(200, {"Content-Type": "application/json"}, b'{"a":  [1, 2]}\n')
    out = await web_fetch.call(ctx(allow_private=True), {"url": server.url("/data.json")})
    assert out == f'Title: (none)\nURL: {server.url("/data.json")}\n\n{{"a":  [1, 2]}}'


@pytest.mark.parametrize(("content_type", "body", "label"), [
    ("image/png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 100, "image/png"),
    ("application/octet-stream", b"\x00\x01\x02", "application/octet-stream"),
    ("application/pdf", b"%PDF-1.7", "application/pdf"),
    ("", b"GIF89a\x00\x00\x01", "no content type, binary bytes"),
])
async def test_binary_content_refused(server: LocalServer, content_type: str, body: bytes, label: str) -> None:
    server.routes["/bin"] = Route(200, {"Content-Type": content_type} if content_type else {}, body)
    with pytest.raises(WebFetchError) as info:
        await web_fetch.call(ctx(allow_private=True), {"url": server.url("/bin")})
    assert str(info.value) == (f"refusing binary content ({label}) from {server.url('/bin')}"
                               + (": only HTML and text can be read" if content_type else ""))


async def test_download_capped_at_2_mb(server: LocalServer) -> None:
    server.routes["/big"] = Route(200, {"Content-Type": "text/plain"}, b"a" * (3 * 1024 * 1024))
    out = await web_fetch.call(ctx(allow_private=True), {"url": server.url("/big")})
    assert out == (f"Title: (none)\nURL: {server.url('/big')}\n\n" + "a" * MAX_BYTES
                   + "\n\n[Page cut: the download stopped after 2,097,152 bytes (the 2 MB cap); "
                   "the rest was not read.]")


async def test_exactly_2_mb_is_not_cut(server: LocalServer) -> None:
    server.routes["/full"] = Route(200, {"Content-Type": "text/plain"}, b"b" * MAX_BYTES)
    page = await fetch_page(server.url("/full"), allow_private=True)
    assert page.truncated is False
    assert len(page.body) == MAX_BYTES


async def test_http_error_status(server: LocalServer) -> None:
    with pytest.raises(WebFetchError, match=r"^HTTP 404 Not Found from http://127\.0\.0\.1:\d+/missing$"):
        await web_fetch.call(ctx(allow_private=True), {"url": server.url("/missing")})


async def test_time_limit() -> None:
    transport = RecordingTransport(delay=5)
    with pytest.raises(WebFetchError, match=r"^timed out after 0.1 s fetching http://example.test/$"):
        await fetch_page("http://example.test/", allow_private=True, transport=transport, time_limit=0.1)


async def test_unresolvable_host() -> None:
    transport = RecordingTransport()
    with pytest.raises(WebFetchError, match="^cannot resolve host 'nowhere.test'$"):
        await fetch_page("http://nowhere.test/", resolver=fixed_resolver({"nowhere.test": []}), transport=transport)
    assert transport.requests == []


async def test_invalid_redirect_location(server: LocalServer) -> None:
    server.routes["/bad"] = Route(302, {"Location": "http://host:port/"})
    pattern = (r"^could not fetch http://127\.0\.0\.1:\d+/bad: RemoteProtocolError: "
               r"Invalid URL in location header: Invalid port: 'port'\.$")
    with pytest.raises(WebFetchError, match=pattern):
        await fetch_page(server.url("/bad"), allow_private=True)


def test_tool_schema() -> None:
    assert WEB_FETCH is web_fetch
    assert web_fetch.name == "web_fetch"
    assert web_fetch.parameters["required"] == ["url"]
    assert web_fetch.description == "Fetch a web page (http or https) and return its title and readable text."
