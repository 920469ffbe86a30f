"""The loopback HTTP server under the fakes: threaded, HTTP/1.1 keep-alive, and quick to stop; and the
start/stop lifecycle the fakes share (:class:`FakeService`)."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class KeepAliveHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that can end its open (idle keep-alive) connections when it stops."""

    daemon_threads = False
    block_on_close = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Track the connection, then serve it in its own thread."""
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        """Forget the connection and close it."""
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def end_connections(self) -> None:
        """Make every open connection read end-of-file, so idle handlers return (answers in progress finish)."""
        with self._open_lock:
            conns = list(self._open)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RD)
            except OSError:
                pass


class FakeService:
    """A fake HTTP service on a random loopback port, served from a background thread.

    Subclasses give the request handler (:meth:`_handler`) and, when handlers can wait (long polls,
    simulated latency), how to wake them at stop (:meth:`_wake`).
    """

    thread_name = "fake-http"

    def __init__(self) -> None:
        self._server: KeepAliveHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    def _starting(self) -> None:
        """Called before serving starts (reset stop flags)."""

    def _wake(self) -> None:
        """Called first at stop: make waiting handlers return."""

    def _threads(self) -> list[threading.Thread]:
        """Threads of the service's own, joined at stop."""
        return []

    def start(self) -> Self:
        """Bind a free port and serve in a background thread."""
        if self._server is None:
            self._starting()
            self._server = KeepAliveHTTPServer(("127.0.0.1", 0), self._handler())
            self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                            name=self.thread_name, daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Wake waiting handlers, stop serving, end idle connections, close the socket, join every thread."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._wake()
        server.shutdown()
        server.end_connections()
        server.server_close()
        for t in [thread, *self._threads()]:
            if t is not None:
                t.join(5)
        self._server = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port."""
        assert self._server is not None, "server not started"
        return self._server.server_address[1]
