"""The model's context window, and where it came from (DESIGN §2.2).

In order: ``model_context_window`` from config.json; what the server said (asked at start and when the model
changes, or read from an overflow error); the table of known models (:mod:`agent.tokens`); else 2,048 for a
server on a loopback or private address (:data:`LOCAL_DEFAULT_WINDOW`), 128,000 for any other. A window an
overflow error names wins over a larger ``model_context_window`` too: the server knows its window. With
``model_context_window`` 0 and a model the table does not know, the server is asked, concurrently:

- llama.cpp's server: ``GET /props`` (``default_generation_settings.n_ctx``, a slot's window);
- vLLM and SGLang: ``GET /v1/models`` (``max_model_len`` of the model);
- LM Studio: ``GET /api/v0/models`` (``loaded_context_length`` of the model);
- Ollama: ``GET /api/ps`` (``context_length`` of the loaded model), else ``POST /api/show`` (``num_ctx`` among
  its parameters, else the model's own context length in ``model_info``).

llama-cpp-python's server says its window nowhere but in its overflow errors ("This model's maximum context
length is 2048 tokens"); every server's overflow wording that names the window teaches it too, so one overflow
is the most a newcomer meets. Its default window is 2,048 tokens, which is why a local server that says
nothing is assumed to have that window rather than a hosted model's 128,000: a newcomer's first turns fit
(DESIGN §2.2), and a bigger window is one ``model_context_window`` away.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.slots import is_local_endpoint
from agent.tokens import CONTEXT_WINDOWS, DEFAULT_CONTEXT_WINDOW, context_window

if TYPE_CHECKING:
    from config.settings import Config

logger = logging.getLogger(__name__)

#: Seconds the discovery may take in all: each request has its own 3 s timeout (agent/llm.py
#: ``server_json``); this backstop also covers the first request's import of the SDK.
DISCOVERY_TIMEOUT = 15.0

CONFIGURED = "model_context_window in config.json"
TABLE = "the table of known models"
DEFAULT = "the default for a model the table does not know"
LOCAL_DEFAULT = "the default for a local server that does not say its window"

#: The window assumed for a server on a loopback or private address that does not say its window and whose
#: model the table does not know: llama-cpp-python's default ``n_ctx``, the smallest a local server runs with.
LOCAL_DEFAULT_WINDOW = 2048
OVERFLOW = "the server's overflow error"

#: "Too long" wordings that name the window (lower case).
_WINDOW_IN_ERROR = [re.compile(p) for p in (
    r"maximum context length is (\d+)",  # OpenAI, vLLM, llama-cpp-python, DeepSeek, OpenRouter
    r"context length is only (\d+)",  # vLLM
    r"maximum model length of (\d+)",  # vLLM's engine
    r"available context size \((\d+) tokens\)",  # llama.cpp's server
    r"model's context length \((\d+) tokens\)",  # SGLang
    r"maximum context length of (\d+)",  # SGLang
    r"context length of only (\d+)",  # LM Studio
    r"n_ctx \((\d+)\)",  # LM Studio (llama.cpp engine)
)]

#: "Too long" wordings that give the server's count of the prompt we sent (lower case).
_PROMPT_IN_ERROR = [re.compile(p) for p in (
    r"\((\d+) in the messages",  # llama-cpp-python, vLLM, DeepSeek: "(4488 in the messages, 512 in the ..."
    r"request \((\d+) tokens\) exceeds",  # llama.cpp's server
    r"the input \((\d+) tokens\)",  # SGLang
    r"request has (\d+) input tokens",  # vLLM
    r"you passed (\d+) input tokens",  # vLLM
    r"decoder prompt \(length (\d+)\)",  # vLLM's engine
    r"trying to keep the first (\d+) tokens",  # LM Studio
)]
#: The most our count may be scaled up by: a server whose tokenizer counts the same text as far more tokens.
MAX_COUNT_RATIO = 3.0

#: ``get_json(method, path, body)``: the decoded JSON answer of the model server for a path at its root.
GetJson = Callable[[str, str, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Window:
    """A context window in tokens, and where it came from."""

    tokens: int
    source: str

    def describe(self) -> str:
        """``2,048 tokens (from llama.cpp's /props)``."""
        return f"{self.tokens:,} tokens (from {self.source})"


@functools.lru_cache(maxsize=16)
def _local(base_url: str | None) -> bool:
    """True for an endpoint on a loopback or private address (agent/slots.py); False for none or a bad URL."""
    try:
        return bool(base_url) and is_local_endpoint(base_url)
    except ValueError:
        return False


@functools.lru_cache(maxsize=256)
def table_window(model: str) -> int | None:
    """The window the table of known models gives ``model``; None when no prefix matches (kept per model name:
    every turn asks)."""
    name = model.rsplit("/", 1)[-1].strip().lower()
    return context_window(model) if any(name.startswith(prefix) for prefix in CONTEXT_WINDOWS) else None


def prompt_in_error(message: str) -> int | None:
    """The server's count of the prompt an overflow error gives ("(2044 in the messages, 256 in the ...")."""
    text = message.lower()
    for pattern in _PROMPT_IN_ERROR:
        match = pattern.search(text)
        if match and int(match.group(1)) > 0:
            return int(match.group(1))
    return None


def window_in_error(message: str) -> int | None:
    """The window an overflow error names ("maximum context length is 2048 tokens"), if it names one."""
    text = message.lower()
    for pattern in _WINDOW_IN_ERROR:
        match = pattern.search(text)
        if match and int(match.group(1)) > 0:
            return int(match.group(1))
    return None


class ModelWindows:
    """``windows(model)`` is the model's window in tokens, as our token counter counts (:meth:`ratio`);
    :meth:`get` gives the server's window and where it came from."""

    def __init__(self, config: Callable[[], Config]) -> None:
        self.config = config
        self._found: dict[str, Window] = {}
        self._ratios: dict[str, float] = {}

    def __call__(self, model: str) -> int:
        return int(self.get(model).tokens / self.ratio(model))

    def ratio(self, model: str) -> float:
        """How many tokens the server counts for each of ours (1.0 until an overflow error shows more): a local
        model's tokenizer is not the o200k/cl100k one the bot counts with."""
        return self._ratios.get(model, 1.0)

    def get(self, model: str) -> Window:
        """The window of ``model``: configured (for the main model), found, the table's, or the default."""
        cfg = self.config()
        found = self._found.get(model)
        if model == cfg.model and cfg.model_context_window > 0:
            # An overflow that named a smaller window wins over the setting: the server knows its window.
            if found is not None and found.source == OVERFLOW and found.tokens < cfg.model_context_window:
                return found
            return Window(cfg.model_context_window, CONFIGURED)
        if found is not None:
            return found
        known = table_window(model)
        if known is not None:
            return Window(known, TABLE)
        return Window(LOCAL_DEFAULT_WINDOW, LOCAL_DEFAULT) if _local(cfg.open_ai_api_base) else \
            Window(DEFAULT_CONTEXT_WINDOW, DEFAULT)

    def needs_asking(self, model: str) -> bool:
        """True when nothing but the server can say the window: not configured, and unknown to the table."""
        cfg = self.config()
        configured = model == cfg.model and cfg.model_context_window > 0
        return not configured and model not in self._found and table_window(model) is None

    def learn(self, model: str, window: Window) -> None:
        """Take a window the server said."""
        self._found[model] = window
        logger.debug("model %s: context window %s", model, window.describe())

    def learn_from_error(self, model: str, message: str, sent: int | None = None) -> bool:
        """After an overflow: take the window the error names when it is smaller than the one in force (also
        when ``model_context_window`` is set larger: the server knows its window), and, when it gives the
        server's count of the prompt we counted as ``sent`` tokens, how much more the server counts. True when
        either changed."""
        changed = False
        named = window_in_error(message)
        current = self.get(model)
        if named is not None and named < current.tokens:
            self._found[model] = Window(named, OVERFLOW)
            if current.source == CONFIGURED:
                logger.warning("model %s: the server's overflow error says the context window is %d tokens, but "
                               "model_context_window in config.json is larger (%d); fitting to the server's %d "
                               "from now on (set model_context_window to %d or less)",
                               model, named, current.tokens, named, named)
            else:
                logger.warning("model %s: the server's overflow error says the context window is %d tokens, not "
                               "%d; using it from now on (set model_context_window to %d in config.json to start "
                               "with it)", model, named, current.tokens, named)
            changed = True
        theirs = prompt_in_error(message)
        if theirs is not None and sent and theirs > sent * self.ratio(model):
            ratio = min(MAX_COUNT_RATIO, theirs / sent * 1.05)  # a little more, so the next request fits
            logger.warning("model %s: the server counted %d tokens where the bot counted %d; budgets are counted "
                           "%.2f times larger from now on", model, theirs, sent, ratio)
            self._ratios[model] = ratio
            changed = True
        return changed

    async def discover(self, model: str, get_json: GetJson) -> Window | None:
        """Ask the server for the window of ``model`` when nothing else knows it; log what was found."""
        if not self.needs_asking(model):
            return None
        found = await ask_server(model, get_json)
        if found is None:
            assumed = self.get(model)
            hint = "larger" if assumed.source == LOCAL_DEFAULT else "smaller"
            logger.warning("model %s: the server did not say its context window; assuming %d tokens until an "
                           "overflow error says otherwise. Set model_context_window in config.json if the server's "
                           "window is %s.", model, assumed.tokens, hint)
            return None
        self.learn(model, found)
        return found


async def ask_server(model: str, get_json: GetJson) -> Window | None:
    """The first window the server's discovery endpoints give, in the order of the module docstring."""
    askers = (_llamacpp_props, _openai_models, _lmstudio_models, _ollama_ps, _ollama_show)
    answers = await asyncio.gather(*(_quietly(asker(model, get_json)) for asker in askers))
    return next((window for window in answers if window is not None), None)


async def _quietly(ask: Awaitable[Window | None]) -> Window | None:
    """An asker's answer; None when its endpoint does not exist, fails or times out."""
    try:
        async with asyncio.timeout(DISCOVERY_TIMEOUT):
            return await ask
    except Exception as exc:  # noqa: BLE001 - any server lacks most of these endpoints
        logger.debug("window discovery: %s: %s", type(exc).__name__, exc)
        return None


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _entry(entries: Any, model: str, key: str = "id") -> dict[str, Any] | None:
    """The list entry for ``model`` (by ``key``), else the only entry."""
    if not isinstance(entries, list):
        return None
    entries = [e for e in entries if isinstance(e, dict)]
    match = next((e for e in entries if e.get(key) == model), None)
    return match or (entries[0] if len(entries) == 1 else None)


async def _llamacpp_props(model: str, get_json: GetJson) -> Window | None:
    data = await get_json("GET", "/props", None)
    if not isinstance(data, dict):
        return None
    settings = data.get("default_generation_settings")
    n_ctx = _positive(settings.get("n_ctx")) if isinstance(settings, dict) else None
    n_ctx = n_ctx or _positive(data.get("n_ctx"))
    return Window(n_ctx, "llama.cpp's /props") if n_ctx else None


async def _openai_models(model: str, get_json: GetJson) -> Window | None:
    data = await get_json("GET", "/v1/models", None)
    entry = _entry(data.get("data") if isinstance(data, dict) else None, model)
    size = _positive(entry.get("max_model_len")) if entry else None
    return Window(size, "/v1/models max_model_len (vLLM, SGLang)") if size else None


async def _lmstudio_models(model: str, get_json: GetJson) -> Window | None:
    data = await get_json("GET", "/api/v0/models", None)
    entries = data.get("data") if isinstance(data, dict) else None
    entry = _entry(entries, model)
    if entry is None and isinstance(entries, list):  # the model that is loaded, when the name is another's
        loaded = [e for e in entries if isinstance(e, dict) and e.get("state") == "loaded"]
        entry = loaded[0] if len(loaded) == 1 else None
    size = _positive(entry.get("loaded_context_length")) if entry else None
    return Window(size, "LM Studio's /api/v0/models") if size else None


async def _ollama_ps(model: str, get_json: GetJson) -> Window | None:
    data = await get_json("GET", "/api/ps", None)
    entries = data.get("models") if isinstance(data, dict) else None
    entry = _entry(entries, model, "name") or _entry(entries, model, "model")
    size = _positive(entry.get("context_length")) if entry else None
    return Window(size, "Ollama's /api/ps") if size else None


async def _ollama_show(model: str, get_json: GetJson) -> Window | None:
    data = await get_json("POST", "/api/show", {"model": model})
    if not isinstance(data, dict):
        return None
    parameters = data.get("parameters")
    if isinstance(parameters, str):
        match = re.search(r"^\s*num_ctx\s+(\d+)\s*$", parameters, re.M)
        if match and int(match.group(1)) > 0:
            return Window(int(match.group(1)), "Ollama's /api/show num_ctx")
    info = data.get("model_info")
    if isinstance(info, dict):
        size = next((_positive(v) for k, v in info.items() if k.endswith(".context_length") and _positive(v)), None)
        if size:
            return Window(size, "Ollama's /api/show model_info")
    return None


__all__ = ["LOCAL_DEFAULT_WINDOW", "ModelWindows", "Window", "ask_server", "prompt_in_error", "table_window",
           "window_in_error"]
