"""The ``web_fetch`` tool: fetch a page and return its readable text.

Safety (DESIGN 1.8): only http and https; a 15 s budget for the whole fetch; at most 2 MB read. Unless
``web_fetch_allow_private`` is set, every hop (the first URL and each of at most 5 redirects, which are
followed by hand) is checked *after* DNS resolution: if any address the host resolves to is loopback,
private, link-local, multicast, reserved, unspecified or otherwise not global (IPv4-mapped, 6to4 and
Teredo IPv6 addresses are judged by the IPv4 address inside), the fetch is refused before connecting.
To defeat DNS rebinding, the request then goes to the vetted IP itself, with the original ``Host`` header
and (for https) the original name for SNI and certificate checks, so the name is never resolved twice.

Failures raise :class:`WebFetchError` with a sentence the model can act on.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent.tools.base import ToolContext, tool

if TYPE_CHECKING:
    import httpx  # imported where a page is fetched: about 5 MB the bot need not hold until then
    from bs4 import BeautifulSoup

logger = logging.getLogger(__name__)

MAX_BYTES = 2 * 1024 * 1024
TIMEOUT_S = 15.0
MAX_REDIRECTS = 5
USER_AGENT = "Mozilla/5.0 (compatible; longchat-web-fetch/0.1)"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
AddressCheck = Callable[[IPAddress], bool]
Resolver = Callable[[str, int], Awaitable[list[str]]]

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_TEXT_TYPES = frozenset({
    "application/json", "application/xml", "application/javascript", "application/x-javascript",
    "application/ecmascript", "application/x-yaml", "application/yaml", "application/toml",
    "application/x-sh", "application/sql", "application/graphql",
})
_SPACES = re.compile(r"\s+")
_DROP_TAGS = ["script", "style", "nav", "noscript", "template", "svg", "head", "iframe", "object", "embed"]
_BLOCK_TAGS = ["p", "div", "section", "article", "main", "header", "footer", "aside", "blockquote", "pre",
               "table", "tr", "ul", "ol", "dl", "dt", "dd", "figure", "figcaption", "form", "address", "hr"]


class WebFetchError(Exception):
    """A fetch was refused or failed; the message says why, for the model."""


# --- address policy ---------------------------------------------------------------------------------

def is_public_address(ip: IPAddress) -> bool:
    """True only for globally routable unicast addresses (IPv4 inside IPv6 is judged as IPv4)."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None:
            return is_public_address(embedded)
        if ip in _NAT64:
            return is_public_address(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    if (ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_multicast or ip.is_reserved
            or ip.is_unspecified):
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:
        return False
    return ip.is_global


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


async def resolve_host(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (via the event loop's ``getaddrinfo``), in preference order."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise WebFetchError(f"cannot resolve host {host!r}: {exc.strerror or exc}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _parse_ip(text: str) -> IPAddress:
    return ipaddress.ip_address(text.split("%", 1)[0])  # drop an IPv6 scope id such as %eth0


# --- fetching --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FetchedPage:
    """The raw result of a fetch: final URL, media type, charset (if declared), body and whether it was cut."""

    url: str
    media_type: str
    charset: str | None
    body: bytes
    truncated: bool


def _check_url(url: httpx.URL) -> None:
    if url.scheme not in ("http", "https"):
        raise WebFetchError(f"only http and https URLs can be fetched, not {url.scheme or 'a relative'!r} URLs")
    if not url.host:
        raise WebFetchError(f"the URL {str(url)!r} has no host")


def _parse_url(raw: str) -> httpx.URL:
    import httpx

    try:
        url = httpx.URL(raw.strip())
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise WebFetchError(f"not a valid URL: {raw!r} ({exc})") from None
    _check_url(url)
    return url


async def _vet(url: httpx.URL, resolver: Resolver, address_allowed: AddressCheck) -> str:
    """Resolve the URL's host, refuse it if any address is not allowed, and return the address to use."""
    port = url.port or (443 if url.scheme == "https" else 80)
    addresses = await resolver(url.host, port)
    if not addresses:
        raise WebFetchError(f"cannot resolve host {url.host!r}")
    for text in addresses:
        try:
            ip = _parse_ip(text)
        except ValueError:
            raise WebFetchError(f"host {url.host!r} resolved to an unusable address {text!r}") from None
        if not address_allowed(ip):
            raise WebFetchError(
                f"refusing to fetch {url}: {url.host} resolves to {ip}, a loopback, private or otherwise "
                "non-public address (set web_fetch_allow_private to allow it)")
    return _parse_ip(addresses[0]).compressed


def _media_kind(media_type: str) -> str:
    """'html', 'text', 'unknown' (sniff the body) or 'binary'."""
    if media_type in _HTML_TYPES:
        return "html"
    if (media_type.startswith("text/") or media_type in _TEXT_TYPES
            or media_type.endswith(("+json", "+xml"))):
        return "text"
    if not media_type:
        return "unknown"
    return "binary"


async def fetch_page(raw_url: str, *, allow_private: bool = False,
                     address_allowed: AddressCheck = is_public_address, resolver: Resolver = resolve_host,
                     max_bytes: int = MAX_BYTES, time_limit: float = TIMEOUT_S, max_redirects: int = MAX_REDIRECTS,
                     transport: httpx.AsyncBaseTransport | None = None) -> FetchedPage:
    """Fetch ``raw_url`` under the safety rules above; raise :class:`WebFetchError` on refusal or failure."""
    import httpx

    url = _parse_url(raw_url)
    try:
        async with asyncio.timeout(time_limit), httpx.AsyncClient(
                transport=transport, timeout=time_limit, follow_redirects=False, trust_env=False,
                headers={"User-Agent": USER_AGENT,
                         "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5"}) as client:
            for _hop in range(max_redirects + 1):
                request = await _build_request(client, url, allow_private, resolver, address_allowed)
                response = await client.send(request, stream=True)
                try:
                    if response.is_redirect:
                        url = url.join(response.headers["location"])
                        _check_url(url)
                        logger.debug("web_fetch: redirect %s to %s", response.status_code, url)
                        continue
                    return await _read(response, url, max_bytes)
                finally:
                    await response.aclose()
            raise WebFetchError(f"too many redirects (more than {max_redirects}) starting from {raw_url}")
    except (TimeoutError, httpx.TimeoutException):
        raise WebFetchError(f"timed out after {time_limit:g} s fetching {url}") from None
    except httpx.HTTPError as exc:
        raise WebFetchError(f"could not fetch {url}: {type(exc).__name__}: {exc}") from None


async def _build_request(client: httpx.AsyncClient, url: httpx.URL, allow_private: bool, resolver: Resolver,
                         address_allowed: AddressCheck) -> httpx.Request:
    if allow_private:
        return client.build_request("GET", url)
    ip = await _vet(url, resolver, address_allowed)
    # Connect to the vetted address itself so a second DNS answer cannot point elsewhere.
    extensions = {"sni_hostname": url.raw_host.decode("ascii")} if url.scheme == "https" else {}
    return client.build_request("GET", url.copy_with(host=ip), headers={"Host": url.netloc.decode("ascii")},
                                extensions=extensions)


async def _read(response: httpx.Response, url: httpx.URL, max_bytes: int) -> FetchedPage:
    if response.status_code >= 400:
        raise WebFetchError(f"HTTP {response.status_code} {response.reason_phrase} from {url}")
    media_type = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if _media_kind(media_type) == "binary":
        raise WebFetchError(f"refusing binary content ({media_type}) from {url}: only HTML and text can be read")
    chunks: list[bytes] = []
    size = 0
    truncated = False
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes or response.num_bytes_downloaded > max_bytes:
            truncated = True
            break
    body = b"".join(chunks)[:max_bytes]
    if not media_type and b"\x00" in body[:8192]:
        raise WebFetchError(f"refusing binary content (no content type, binary bytes) from {url}")
    return FetchedPage(url=str(url), media_type=media_type, charset=response.charset_encoding, body=body,
                       truncated=truncated)


# --- text ------------------------------------------------------------------------------------------

def _decode(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


def html_to_text(html: bytes | str, charset: str | None = None) -> tuple[str, str]:
    """Return ``(title, readable text)`` of an HTML page: no scripts, styles or navigation; tidy whitespace."""
    from bs4 import BeautifulSoup, UnicodeDammit  # about 0.1 s to import; only a fetch of a page needs it

    if isinstance(html, bytes):
        if charset:
            html = _decode(html, charset)
        else:  # no charset header: let the page's own <meta charset> or a BOM decide
            html = UnicodeDammit(html, is_html=True).unicode_markup or _decode(html, None)
    if "<" not in html:  # plain text served as HTML (also keeps bs4 from warning about "filename-like" input)
        return "", _tidy(html)
    return _soup_text(BeautifulSoup(html, "html.parser"))


def _soup_text(soup: BeautifulSoup) -> tuple[str, str]:
    from bs4 import NavigableString

    title = " ".join(soup.title.get_text(" ").split()) if soup.title else ""
    for tag in soup(_DROP_TAGS):
        tag.decompose()
    # In HTML any run of whitespace (newlines included) reads as one space; lines come from the markup below.
    for node in soup.find_all(string=True):
        if type(node) is NavigableString and node.find_parent("pre") is None:
            node.replace_with(_SPACES.sub(" ", node))
    for br in soup.find_all("br"):
        br.replace_with("\n")
    for level in range(1, 7):
        for heading in soup.find_all(f"h{level}"):
            heading.insert_before("\n\n" + "#" * level + " ")
            heading.insert_after("\n\n")
    for item in soup.find_all("li"):
        item.insert_before("\n- ")
    for block in soup.find_all(_BLOCK_TAGS):
        block.insert_before("\n\n")
        block.insert_after("\n\n")
    return title, _tidy(soup.get_text())


def _tidy(text: str) -> str:
    """Collapse runs of spaces within lines, and runs of blank lines to one."""
    out: list[str] = []
    for line in text.splitlines():
        line = " ".join(line.split())
        if line == "-":  # a list item whose content starts on the next line
            line = ""
        if not line and (not out or not out[-1]):
            continue
        out.append(line)
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out)


def page_to_text(page: FetchedPage) -> str:
    """Format a fetched page as ``Title: …\\nURL: …\\n\\n<text>`` with a notice when the download was cut."""
    head = page.body[:1024].lstrip().lower()
    is_html = page.media_type in _HTML_TYPES or (
        not page.media_type and head.startswith((b"<!doctype html", b"<html")))
    if is_html:
        title, text = html_to_text(page.body, page.charset)
    else:
        title, text = "", _decode(page.body, page.charset).strip()
    out = f"Title: {title or '(none)'}\nURL: {page.url}\n\n{text or '(no readable text)'}"
    if page.truncated:
        out += (f"\n\n[Page cut: the download stopped after {len(page.body):,} bytes "
                f"(the {MAX_BYTES // (1024 * 1024)} MB cap); the rest was not read.]")
    return out


@tool
async def web_fetch(ctx: ToolContext, url: str) -> str:
    """Fetch a web page (http or https) and return its title and readable text.

    Args:
        url: the full address, e.g. https://example.com/page
    """
    page = await fetch_page(url, allow_private=ctx.config.web_fetch_allow_private)
    logger.info("web_fetch: session=%s url=%s bytes=%d truncated=%s", ctx.session_id, page.url,
                len(page.body), page.truncated)
    return await asyncio.to_thread(page_to_text, page)  # parsing 2 MB of HTML takes a while


WEB_FETCH = web_fetch
