"""python-telegram-bot's networking on aiohttp instead of httpx.

PTB makes its HTTP backend pluggable (``telegram.request.BaseRequest``, a documented extension point);
this one is a small adapter over an ``aiohttp.ClientSession``. It exists because httpx's connection pool
does per-request bookkeeping over every queued request and kept-alive connection (through anyio), while
aiohttp's connector hands out a free connection directly, and the model client is on aiohttp already
(README, "Benchmarks", has the measurement).

Per request, the adapter does no work that gives the same answer every time: the proxy is looked up once
per host, the ``ClientTimeout`` is built once per distinct set of timeouts, and the session has no cookie
jar to filter (the Bot API sets no cookies). yarl caches URL parsing itself.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlencode

import aiohttp
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, RequestData

from channels.telegram.http import EnvProxies, ssl_context

logger = logging.getLogger(__name__)

_FORM = {"Content-Type": "application/x-www-form-urlencoded"}
#: The type of PTB's "not passed, use the default" marker.
DefaultValue = type(BaseRequest.DEFAULT_NONE)
#: Bound on the per-timeout cache: callers may pass any timeout.
_CACHE_SIZE = 256


class AiohttpRequest(BaseRequest):
    """A :class:`telegram.request.BaseRequest` on aiohttp with a bounded connection pool.

    Timeouts have PTB's meaning: ``connect_timeout`` to open a connection, ``read_timeout`` between
    reads of the answer, ``pool_timeout`` to wait for a free connection. aiohttp has no write timeout:
    ``write_timeout`` bounds the whole request instead, together with the others.
    """

    def __init__(self, *, connection_pool_size: int = 16, connect_timeout: float | None = 10.0,
                 read_timeout: float | None = 20.0, write_timeout: float | None = 20.0,
                 pool_timeout: float | None = 10.0, media_write_timeout: float | None = 20.0) -> None:
        self.connection_pool_size = connection_pool_size
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._write_timeout = write_timeout
        self._pool_timeout = pool_timeout
        self._media_write_timeout = media_write_timeout
        self._session: aiohttp.ClientSession | None = None
        self._proxies = EnvProxies()
        #: (pool, connect, write, read) -> ClientTimeout
        self._timeouts: dict[tuple[Any, ...], aiohttp.ClientTimeout] = {}

    @property
    def read_timeout(self) -> float | None:
        """The default read timeout, in seconds."""
        return self._read_timeout

    async def initialize(self) -> None:
        """Open the session (on the running loop)."""
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self.connection_pool_size, ssl=ssl_context())
            # The Bot API sets no cookies; the default jar still filters its (empty) contents per request.
            self._session = aiohttp.ClientSession(connector=connector, headers={"User-Agent": self.USER_AGENT},
                                                  cookie_jar=aiohttp.DummyCookieJar())
            # The environment is read again at each start (proxy settings may have changed).
            self._proxies.clear()

    async def shutdown(self) -> None:
        """Close the session and its connections."""
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: Any = BaseRequest.DEFAULT_NONE,
        write_timeout: Any = BaseRequest.DEFAULT_NONE,
        connect_timeout: Any = BaseRequest.DEFAULT_NONE,
        pool_timeout: Any = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        """Send one request; return ``(status, body)``. Network failures raise PTB's errors."""
        session = self._session
        if session is None or session.closed:
            raise RuntimeError("This AiohttpRequest is not initialized!")
        files = request_data.multipart_data if request_data else None
        fields = request_data.json_parameters if request_data else None
        read = self._read_timeout if isinstance(read_timeout, DefaultValue) else read_timeout
        connect = self._connect_timeout if isinstance(connect_timeout, DefaultValue) else connect_timeout
        pool = self._pool_timeout if isinstance(pool_timeout, DefaultValue) else pool_timeout
        if isinstance(write_timeout, DefaultValue):
            write_timeout = self._write_timeout if not files else self._media_write_timeout
        timeout = self._timeout(pool, connect, write_timeout, read)
        try:
            body, headers = _body(fields, files)
            async with session.request(method, url, data=body, headers=headers, timeout=timeout,
                                       proxy=self._proxies.for_url(url)) as response:
                return response.status, await response.read()
        except TimeoutError as exc:
            raise TimedOut from exc
        except aiohttp.ClientError as exc:
            raise NetworkError(f"aiohttp.{type(exc).__name__}: {exc}") from exc

    def _timeout(self, pool: float | None, connect: float | None, write: float | None,
                 read: float | None) -> aiohttp.ClientTimeout:
        """The ``ClientTimeout`` for these PTB timeouts, built once per combination (it is immutable)."""
        key = (pool, connect, write, read)
        timeout = self._timeouts.get(key)
        if timeout is None:
            parts = [t for t in key if t is not None]
            timeout = aiohttp.ClientTimeout(total=sum(parts) if len(parts) == 4 else None,
                                            connect=None if pool is None or connect is None else pool + connect,
                                            sock_connect=connect, sock_read=read)
            if len(self._timeouts) >= _CACHE_SIZE:
                self._timeouts.clear()
            self._timeouts[key] = timeout
        return timeout


def _body(fields: dict[str, str] | None, files: dict[str, Any] | None) -> tuple[Any, dict[str, str] | None]:
    """A form and its headers: url-encoded with ``urlencode`` (the bytes aiohttp's FormData would build), or
    multipart when files are uploaded (as PTB's httpx backend sends them)."""
    if not files:
        if not fields:
            return None, None
        return urlencode(fields).encode(), _FORM
    form = aiohttp.FormData()
    for name, value in (fields or {}).items():
        form.add_field(name, value)
    for name, part in files.items():
        filename, content, mime = part if len(part) == 3 else (*part, None)
        form.add_field(name, content, filename=filename, content_type=mime)
    return form, None
