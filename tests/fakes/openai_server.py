"""A real HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions protocol, for tests.

It runs in a background thread, so sync and async tests (and ``app.py`` run as a subprocess) can use it::

    with FakeOpenAIServer() as srv:
        srv.enqueue_text("hello")
        srv.enqueue_tool_calls([("current_time", "{}")])
        srv.enqueue_error(400, "too long", code="context_length_exceeded")
        llm = OpenAILLM(api_key="x", base_url=srv.base_url, model="m")

Scripted replies are answered first in, first out. ``enqueue_provider_error(name)`` replays a real provider's
error answer, byte for byte, from ``PROVIDER_ERRORS`` (tests/fakes/provider_errors.py). When the queue is
empty, :attr:`responder` is asked, and then the default: ``"echo: " + <the last user message text>``.
``"stream": true`` is answered with SSE chunks ending with ``data: [DONE]``; :meth:`enqueue_stream` scripts a
slow stream (a first-token delay, a pause between pieces) sent with chunked transfer encoding like real
servers, which may break off midway (the connection is dropped without the final chunk). Every request body is
recorded in :attr:`requests`.

Connections are HTTP/1.1 keep-alive, as with real providers (a new connection per request would charge the
client for connection set-up a real deployment does not pay); :meth:`stop` ends idle ones, so it never
waits on them. Streamed answers are chunked and keep their connection too; scripted slow streams close theirs.
"""

from __future__ import annotations

import email.parser
import email.policy
import itertools
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.http_server import FakeService
from tests.fakes.provider_errors import PROVIDER_ERRORS

logger = logging.getLogger(__name__)

#: What :attr:`FakeOpenAIServer.responder` may return: a full completion (has "choices"), an error
#: (has "error"; HTTP status from "status", default 400), an assistant message ({"content", "tool_calls"}),
#: a plain string (the reply text), or None (use the default echo).
Responder = Callable[[dict[str, Any]], "dict[str, Any] | str | None"]

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 429: "rate_limit_error"}


def message_text(message: dict[str, Any]) -> str:
    """The text of one chat message, whether ``content`` is a string or a list of parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def prompt_chars(body: dict[str, Any]) -> int:
    """Characters of every message's content plus its tool call arguments."""
    total = 0
    for msg in body.get("messages") or []:
        total += len(message_text(msg))
        for call in msg.get("tool_calls") or []:
            total += len((call.get("function") or {}).get("arguments") or "")
    return total


class _Error:
    """A scripted error response: a JSON payload, or raw bytes sent exactly as given."""

    def __init__(self, status: int, payload: dict[str, Any] | list[Any] | bytes,
                 headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.payload = payload
        self.headers = dict(headers or {})


def error_payload(status: int, message: str, code: str | None = None, type: str | None = None,
                  param: str | None = None) -> dict[str, Any]:
    """An OpenAI-style ``{"error": {...}}`` body."""
    etype = type or _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": etype, "param": param, "code": code}}


#: What servers answer a chat request with an image part for a model that cannot take images, as they send it
#: (status, body). OpenAI and Azure: a 400 naming the part (seen in many reports, e.g. vllm-project/vllm#11629);
#: llama.cpp's server without ``--mmproj``: a 500 (ggml-org/llama.cpp#15377); vLLM with a text-only model: its
#: own error object with a 400 (studio-dots-ai/dots.ocr#61).
IMAGE_REFUSALS: dict[str, tuple[int, dict[str, Any]]] = {
    "openai": (400, {"error": {"message": "Invalid content type. image_url is only supported by certain models.",
                               "type": "invalid_request_error", "param": "messages.[1].content.[1].type",
                               "code": None}}),
    "llamacpp": (500, {"error": {"code": 500, "message": "image input is not supported - hint: if this is "
                                 "unexpected, you may need to provide the mmproj", "type": "server_error"}}),
    "vllm": (400, {"object": "error", "message": "facebook/opt-125m is not a multimodal model None",
                   "type": "BadRequestError", "param": None, "code": 400}),
}


def has_image_part(body: dict[str, Any]) -> bool:
    """True when a chat request carries an ``image_url`` content part."""
    return any(isinstance(m.get("content"), list) and any(isinstance(p, dict) and p.get("type") == "image_url"
                                                         for p in m["content"]) for m in body.get("messages") or [])


class FakeOpenAIServer(FakeService):
    """An OpenAI-compatible chat-completions endpoint on a random loopback port."""

    thread_name = "fake-openai"

    def __init__(self, *, model: str = "fake-model") -> None:
        super().__init__()
        self.model = model
        #: seconds to wait before answering each chat request
        self.latency: float = 0.0
        #: when set, requests with more prompt characters than this get a context_length_exceeded 400
        self.max_prompt_chars: int | None = None
        #: consulted when the scripted queue is empty
        self.responder: Responder | None = None
        #: when set, requests without ``Authorization: Bearer <key>`` get a 401
        self.required_api_key: str | None = None
        self._lock = threading.Lock()
        self._queue: deque[dict[str, Any] | _Error] = deque()
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        #: the path (with query) of every request, in order
        self._paths: list[str] = []
        self._arrived = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        #: chat requests being answered now, and the most there ever were at once
        self.in_flight = 0
        self.max_in_flight = 0
        #: when set, chat requests whose path does not start with it get a 404 (a base URL without /v1)
        self.chat_prefix: str | None = None
        #: when set ("openai", "llamacpp", "vllm"), a chat request carrying an image part gets that server's own
        #: refusal (:data:`IMAGE_REFUSALS`), byte for byte
        self.refuse_images: str | None = None
        #: transcripts ``/audio/transcriptions`` answers, first in first out (then :attr:`default_transcript`);
        #: an ``(status, body)`` tuple is answered as an error
        self.transcripts: deque[str | tuple[int, dict[str, Any]]] = deque()
        self.default_transcript = "this is what the voice note said"
        #: every transcription request: {"model", "filename", "content_type", "audio", "response_format"}
        self.transcriptions: list[dict[str, Any]] = []
        #: answers of the window-discovery endpoints by path (``/props``, ``/api/show``, ...); others get a 404
        self.discovery: dict[str, Any] = {}
        #: False: answers carry no ``usage`` (some local servers), streamed or not
        self.report_usage = True
        #: when set (400 or 422), a request with ``stream_options`` gets that error, as Mistral, Groq, older
        #: Ollama and Azure API versions answer it
        self.refuse_stream_options: int | None = None

    # --- lifecycle (FakeService) ---------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        return _make_handler(self)

    def _starting(self) -> None:
        self._stopping.clear()

    def _wake(self) -> None:
        self._stopping.set()
        with self._lock:
            self._arrived.notify_all()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``, for ``open_ai_api_base`` or the SDK's ``base_url``."""
        return f"http://127.0.0.1:{self.port}/v1"

    # --- scripting ---------------------------------------------------------------------------
    def enqueue_text(self, text: str, usage: dict[str, Any] | None = None) -> None:
        """Answer the next request with ``text`` (and this ``usage`` instead of the fake's count)."""
        self._push({"content": text, **({"usage": usage} if usage is not None else {})})

    def enqueue_tool_calls(self, calls: Iterable[tuple[str, str]], content: str | None = None,
                           usage: dict[str, Any] | None = None) -> None:
        """Answer the next request with tool calls: ``[(name, arguments_json), ...]``."""
        tool_calls = [
            {"id": f"call_{next(self._ids)}", "type": "function", "function": {"name": name, "arguments": args}}
            for name, args in calls
        ]
        self._push({"content": content, "tool_calls": tool_calls, **({"usage": usage} if usage is not None else {})})

    def enqueue_stream(self, text: str, *, first_delay: float = 0.0, delay: float = 0.0, piece: int = 8,
                       break_after: int | None = None, tool_calls: Iterable[tuple[str, str]] = (),
                       finish: bool = True, error: dict[str, Any] | None = None) -> None:
        """Answer the next request with ``text``, streamed slowly when asked for a stream: ``first_delay``
        seconds before the first piece, ``delay`` between pieces of ``piece`` characters; after
        ``break_after`` characters the connection is dropped midway. ``finish=False`` ends the stream with
        ``data: [DONE]`` but no finish reason (llama-cpp-python cutting an answer when another request
        arrives); ``error`` is sent as ``data: {"error": ...}`` after the text (an error inside a stream)."""
        calls = [{"id": f"call_{next(self._ids)}", "type": "function",
                  "function": {"name": name, "arguments": args}} for name, args in tool_calls]
        self._push({"content": text, "tool_calls": calls or None,
                    "_stream": {"first_delay": first_delay, "delay": delay, "piece": piece,
                                "break_after": break_after, "finish": finish, "error": error}})

    def enqueue_empty_stream(self) -> None:
        """Answer the next streamed request with ``200 OK`` and an empty event stream: no data, no ``[DONE]``
        (llama-cpp-python's answer to a streamed request over its window)."""
        self._push({"content": "", "_stream": {"empty": True}})

    def enqueue_error(self, status: int, message: str, code: str | None = None, type: str | None = None,
                      headers: dict[str, str] | None = None) -> None:
        """Answer the next request with an HTTP error, e.g. 429 with ``{"Retry-After": "1"}``."""
        self._push(_Error(status, error_payload(status, message, code, type), headers))

    def enqueue_raw(self, status: int, body: str | bytes, headers: dict[str, str] | None = None) -> None:
        """Answer the next request with exactly this body (JSON content type unless ``headers`` say otherwise)."""
        data = body.encode() if isinstance(body, str) else body
        self._push(_Error(status, data, headers))

    def enqueue_provider_error(self, name: str) -> None:
        """Answer the next request with a recorded provider error from :data:`PROVIDER_ERRORS`."""
        status, headers, body = PROVIDER_ERRORS[name]
        self.enqueue_raw(status, body, headers)

    def enqueue_response(self, response: dict[str, Any]) -> None:
        """Answer the next request with this completion dict, sent as is."""
        self._push(response)

    def _push(self, item: dict[str, Any] | _Error) -> None:
        with self._lock:
            self._queue.append(item)

    @property
    def pending(self) -> int:
        """Scripted responses not yet used."""
        with self._lock:
            return len(self._queue)

    # --- inspection --------------------------------------------------------------------------
    @property
    def requests(self) -> list[dict[str, Any]]:
        """A copy of every chat request body received, oldest first."""
        with self._lock:
            return list(self._requests)

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """The headers of every chat request (lower-case names)."""
        with self._lock:
            return list(self._headers)

    @property
    def paths(self) -> list[str]:
        """The path and query of every request received."""
        with self._lock:
            return list(self._paths)

    def last_messages(self) -> list[dict[str, Any]]:
        """The ``messages`` of the latest request."""
        reqs = self.requests
        return list(reqs[-1].get("messages") or []) if reqs else []

    def last_user_texts(self) -> list[str]:
        """The texts of every user message in the latest request."""
        return [message_text(m) for m in self.last_messages() if m.get("role") == "user"]

    def last_system_text(self) -> str:
        """The joined system messages of the latest request."""
        return "\n".join(message_text(m) for m in self.last_messages() if m.get("role") == "system")

    def wait_for_requests(self, n: int, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Block until ``n`` requests arrived; raise ``TimeoutError`` otherwise."""
        deadline = time.monotonic() + timeout
        with self._arrived:
            while len(self._requests) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"expected {n} requests, got {len(self._requests)}")
                self._arrived.wait(left)
            return list(self._requests)

    def reset(self) -> None:
        """Forget recorded requests and scripted responses."""
        with self._lock:
            self._requests.clear()
            self._headers.clear()
            self._queue.clear()

    # --- answering (runs in handler threads) -------------------------------------------------
    def _record(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        with self._arrived:
            self._requests.append(body)
            self._headers.append(headers)
            self._arrived.notify_all()

    def _answer(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any] | _Error:
        """Decide the reply to one chat request: auth, window check, queue, responder, echo."""
        if self.required_api_key is not None and headers.get("authorization") != f"Bearer {self.required_api_key}":
            return _Error(401, error_payload(401, "Incorrect API key provided.", "invalid_api_key"))
        if self.refuse_images and has_image_part(body):
            status, payload = IMAGE_REFUSALS[self.refuse_images]
            return _Error(status, payload)
        if self.refuse_stream_options and "stream_options" in body:
            status = self.refuse_stream_options
            if status == 422:  # Mistral's words: the field is named in "loc" only
                return _Error(422, {"object": "error", "message": {"detail": [{
                    "type": "extra_forbidden", "loc": ["body", "stream_options", "include_usage"],
                    "msg": "Extra inputs are not permitted", "input": True}]}, "type": "invalid_request_error"})
            return _Error(status, error_payload(status, "Unrecognized request argument supplied: stream_options"))
        if self.max_prompt_chars is not None and prompt_chars(body) > self.max_prompt_chars:
            return _Error(400, error_payload(
                400,
                f"This model's maximum context length is {self.max_prompt_chars} characters. However, your "
                f"messages resulted in {prompt_chars(body)} characters. Please reduce the length of the messages.",
                code="context_length_exceeded", param="messages"))
        with self._lock:
            item = self._queue.popleft() if self._queue else None
        if item is None and self.responder is not None:
            item = self._from_responder(self.responder(body))
        if item is None:
            users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
            item = {"content": "echo: " + (message_text(users[-1]) if users else "")}
        if isinstance(item, _Error) or "choices" in item:
            return item
        completion = self._completion(body, item)
        if "_stream" in item:
            completion["_stream"] = item["_stream"]
        return completion

    @staticmethod
    def _from_responder(value: dict[str, Any] | str | None) -> dict[str, Any] | _Error | None:
        if value is None or isinstance(value, dict) and "choices" in value:
            return value
        if isinstance(value, str):
            return {"content": value}
        if "error" in value:
            status = int(value.get("status", 400))
            return _Error(status, {"error": value["error"]}, value.get("headers"))
        return value

    def _completion(self, body: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
        tool_calls = message.get("tool_calls") or None
        content = message.get("content")
        completion = len(content or "") + sum(len(c["function"]["arguments"]) for c in tool_calls or [])
        prompt = max(1, prompt_chars(body) // 4)
        usage = message.get("usage") or {"prompt_tokens": prompt, "completion_tokens": max(1, completion // 4),
                                          "total_tokens": prompt + max(1, completion // 4)}
        answer = {
            "id": f"chatcmpl-fake{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": content, "tool_calls": tool_calls, "refusal": None,
                            **({"reasoning_content": message["reasoning_content"]}
                               if "reasoning_content" in message else {})},
                "finish_reason": message.get("finish_reason") or ("tool_calls" if tool_calls else "stop"),
                "logprobs": None,
            }],
        }
        if self.report_usage:
            answer["usage"] = usage
        return answer

    def _sleep(self) -> None:
        if self.latency > 0:
            self._stopping.wait(self.latency)


def stream_chunks(response: dict[str, Any], piece: int = 8) -> list[dict[str, Any]]:
    """Split a completion into ``chat.completion.chunk`` dicts the way OpenAI streams it."""
    choice = response["choices"][0]
    msg = choice["message"]
    base = {"id": response["id"], "object": "chat.completion.chunk", "created": response["created"],
            "model": response["model"]}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    out = [chunk({"role": "assistant", "content": ""})]
    thinking = msg.get("reasoning_content") or ""
    for i in range(0, len(thinking), piece):
        out.append(chunk({"reasoning_content": thinking[i:i + piece]}))
    text = msg.get("content") or ""
    for i in range(0, len(text), piece):
        out.append(chunk({"content": text[i:i + piece]}))
    for index, call in enumerate(msg.get("tool_calls") or []):
        fn = call["function"]
        out.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                          "function": {"name": fn["name"], "arguments": ""}}]}))
        args = fn.get("arguments") or ""
        for i in range(0, len(args), piece):
            out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": args[i:i + piece]}}]}))
    out.append(chunk({}, choice.get("finish_reason") or "stop"))
    return out


def _make_handler(fake: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body are separate writes: with Nagle on, the body waits for the ACK of the headers,
        # which the client delays by up to 40 ms. Real servers set TCP_NODELAY too.
        disable_nagle_algorithm = True
        timeout = 30

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            logger.debug("fake-openai: %s", format % args)

        def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            headers = dict(headers or {})
            self.send_response(status)
            self.send_header("Content-Type", headers.pop("Content-Type", "application/json"))
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            fake._paths.append(self.path)
            if self.path in fake.discovery:
                self._json(200, fake.discovery[self.path])
            elif self.path.split("?", 1)[0].rstrip("/").endswith("/models"):
                self._json(200, {"object": "list", "data": [
                    {"id": fake.model, "object": "model", "created": 0, "owned_by": "fake"}]})
            else:
                self._json(404, error_payload(404, f"Unknown path {self.path}"))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.path in fake.discovery:
                fake._paths.append(self.path)
                self._json(200, fake.discovery[self.path])
                return
            path = self.path.split("?", 1)[0].rstrip("/")
            if path.endswith("/audio/transcriptions"):
                fake._paths.append(self.path)
                self._transcription(raw)
                return
            if not path.endswith("/chat/completions") or fake.chat_prefix and not path.startswith(fake.chat_prefix):
                fake._paths.append(self.path)
                self._json(404, error_payload(404, f"Unknown path {self.path}"))
                return
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError as exc:
                self._json(400, error_payload(400, f"We could not parse the JSON body: {exc}"))
                return
            headers = {k.lower(): v for k, v in self.headers.items()}
            fake._paths.append(self.path)
            fake._record(body, headers)
            with fake._lock:
                fake.in_flight += 1
                fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
            try:
                self._reply(body, headers)
            finally:
                with fake._lock:
                    fake.in_flight -= 1

        def _transcription(self, raw: bytes) -> None:
            """``POST /audio/transcriptions``, multipart/form-data as OpenAI takes it: ``file`` and ``model``
            required (a 400 in OpenAI's words without them); answers ``{"text": ...}``."""
            ctype = self.headers.get("Content-Type") or ""
            if not ctype.startswith("multipart/form-data"):
                self._json(400, error_payload(400, "Invalid Content-Type header, expected multipart/form-data"))
                return
            msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + raw)
            fields: dict[str, Any] = {}
            for part in msg.iter_parts():
                name = part.get_param("name", header="content-disposition")
                payload = part.get_payload(decode=True) or b""
                if part.get_filename():
                    fields[name] = {"filename": part.get_filename(), "content_type": part.get_content_type(),
                                    "audio": payload}
                else:
                    fields[name] = payload.decode()
            if "file" not in fields or not isinstance(fields["file"], dict):
                self._json(400, error_payload(400, "you must provide a file", param="file"))
                return
            if not fields.get("model"):
                self._json(400, error_payload(400, "you must provide a model parameter", param="model"))
                return
            with fake._lock:
                fake.transcriptions.append({"model": fields["model"], **fields["file"],
                                            "response_format": fields.get("response_format", "json")})
                answer = fake.transcripts.popleft() if fake.transcripts else fake.default_transcript
            if isinstance(answer, tuple):
                self._json(answer[0], answer[1])
                return
            self._json(200, {"text": answer})

        def _reply(self, body: dict[str, Any], headers: dict[str, str]) -> None:
            fake._sleep()
            reply = fake._answer(body, headers)
            options = reply.pop("_stream", None) if isinstance(reply, dict) else None
            if options is not None and options.get("empty") and body.get("stream"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif isinstance(reply, _Error):
                self._json(reply.status, reply.payload, reply.headers)
            elif body.get("stream") and options is not None:
                self._slow_stream(reply, bool((body.get("stream_options") or {}).get("include_usage")), options)
            elif body.get("stream"):
                self._stream(reply, bool((body.get("stream_options") or {}).get("include_usage")))
            else:
                self._json(200, reply)

        def _stream(self, response: dict[str, Any], include_usage: bool) -> None:
            # Chunked on a kept-alive connection, as real providers stream: closing it after each answer
            # would charge the client a new connection per streamed turn that a real deployment does not pay.
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunks = stream_chunks(response)
            if include_usage and response.get("usage"):
                chunks.append({**{k: chunks[0][k] for k in ("id", "object", "created", "model")},
                               "choices": [], "usage": response.get("usage")})
            events = [b"data: " + json.dumps(item).encode() + b"\n\n" for item in chunks] + [b"data: [DONE]\n\n"]
            self.wfile.write(b"".join(b"%x\r\n%s\r\n" % (len(event), event) for event in events) + b"0\r\n\r\n")
            self.wfile.flush()

        def _slow_stream(self, response: dict[str, Any], include_usage: bool, options: dict[str, Any]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.close_connection = True
            self.end_headers()
            chunks = stream_chunks(response, piece=options["piece"])
            if not options["finish"]:  # cut: the last chunk says nothing but the role, with no finish reason
                chunks[-1] = {**chunks[-1], "choices": [{"index": 0, "delta": {"role": "assistant"},
                                                         "finish_reason": None, "logprobs": None}]}
            if options["error"] is not None:
                chunks[-1] = {"error": options["error"]}
            if include_usage and options["finish"] and options["error"] is None and response.get("usage"):
                chunks.append({**{k: chunks[0][k] for k in ("id", "object", "created", "model")},
                               "choices": [], "usage": response.get("usage")})
            events = [b"data: " + json.dumps(item).encode() + b"\n\n" for item in chunks] + [b"data: [DONE]\n\n"]
            sent_chars, first = 0, True
            try:
                for item, event in zip([*chunks, None], events, strict=True):
                    content = ((item or {}).get("choices") or [{}])[0].get("delta", {}).get("content") if item else None
                    if content:
                        if fake._stopping.wait(options["first_delay"] if first else options["delay"]):
                            return
                        first = False
                        if options["break_after"] is not None and sent_chars >= options["break_after"]:
                            self.connection.shutdown(2)  # dropped midway: no final chunk, no [DONE]
                            return
                        sent_chars += len(content)
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):  # the client went away
                pass

    return Handler


__all__ = ["FakeOpenAIServer", "error_payload", "message_text", "prompt_chars", "stream_chunks"]
