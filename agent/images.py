"""Images in the context (DESIGN §5.1): sent as an image part in the turn that showed them, words after it.

A stored user message that came with a photo holds no image data, only a reference::

    {"role": "user", "content": "what is this?", "image": {"file": "media/telegram_42/photo-1a2b3c4d.jpg",
     "width": 1155, "height": 866, "tokens": 765, "caption": true}}

While the image has no ``description`` it is *pending*: the request of its own turn (the last user message)
carries it as an ``image_url`` part with the JPEG as a base64 ``data:`` URL, built for that request only
(:func:`request_messages`), and the token budget counts it at the provider's rate (``tokens``, see
:func:`media.files.image_tokens`). When the turn is done the message is rewritten, in the database and in the
context, to words (:func:`described`)::

    {"role": "user", "content": "[image: a tabby cat asleep on a red sofa]\\nwhat is this?",
     "image": {..., "description": "a tabby cat asleep on a red sofa"}}

so later turns, summaries, restarts and history_search see ``[image: …]`` text, never base64. The
description is the model's own answer when the photo came without a caption (the answer then is what the
model saw), else one small call (:func:`describe_image`, the one call site to hook usage recording into).

Which models take images (``vision``: ``"auto"``): the table below by name prefix, and what the server says
(a server that refuses an image part is remembered for the model, in this process, and the turn is asked
again without the image); a model neither knows is tried.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.llm import BaseLLM
from core.turns import CtxMessage
from media.files import read_image

if TYPE_CHECKING:
    from config.settings import Config
    from store.store import Store

logger = logging.getLogger(__name__)

#: What a request shows instead of an image the model cannot see (the server refused it, or vision is off).
NOT_SHOWN = "[image: not shown to the model, which cannot see images]"
#: The description kept for an image the model never saw.
NOT_SEEN = "not seen: the model could not see images"
#: The description kept when the description call failed.
NOT_DESCRIBED = "a photo (no description could be made)"
#: An image whose file is gone by the time it is sent.
FILE_GONE = "[image: the file is no longer there]"
#: The prompt of the small description call.
DESCRIBE_PROMPT = ("Describe this image in one or two sentences for a text-only record of the conversation: "
                   "what it shows, and any text in it that matters. Answer with the description only.")
#: The description call's answer cap, and how long a description is kept.
DESCRIBE_MAX_TOKENS = 200
DESCRIPTION_CHARS = 600
#: Seconds the description call may take before the image is kept as :data:`NOT_DESCRIBED`.
DESCRIBE_TIMEOUT = 30.0
#: The note before an answer whose image the server refused (the caption was answered as text).
REFUSED_NOTE = "(This model cannot see images, so I answered the text of your message only.)"

#: Models by name prefix (lower case, the longest match wins): True takes images, False does not.
VISION_MODELS: dict[str, bool] = {
    # OpenAI
    "gpt-4o": True, "chatgpt-4o": True, "gpt-4.1": True, "gpt-4.5": True, "gpt-5": True, "gpt-4-turbo": True,
    "gpt-4-vision": True, "o1": True, "o1-mini": False, "o1-preview": False, "o3": True, "o3-mini": False,
    "o4-mini": True, "gpt-4": False, "gpt-3.5": False, "gpt-oss": False,
    # Anthropic, Google
    "claude": True, "claude-2": False, "claude-instant": False,
    "gemini": True, "gemini-pro": False, "gemini-1.0-pro": False, "gemini-pro-vision": True,
    "gemma-3": True, "gemma-3n": True, "gemma": False,
    # DeepSeek, Qwen, Meta, Mistral, others
    "deepseek": False, "deepseek-vl": True, "janus": True,
    "qwen": False, "qwen-vl": True, "qwen2-vl": True, "qwen2.5-vl": True, "qwen3-vl": True, "qvq": True,
    "qwen-omni": True, "qwq": False,
    "llama3": False, "llama-3": False, "llama3.2-vision": True, "llama-3.2-11b-vision": True,
    "llama-3.2-90b-vision": True, "llama-4": True, "llama4": True, "llava": True, "bakllava": True,
    "mistral": False, "mixtral": False, "pixtral": True, "mistral-small-3.1": True, "mistral-small-3.2": True,
    "mistral-medium": True, "minicpm-v": True, "moondream": True, "internvl": True, "smolvlm": True,
    "glm-4v": True, "glm-4.1v": True, "glm-4.5v": True, "glm-4": False, "grok-2-vision": True, "grok-4": True,
    "grok": False, "kimi-vl": True, "moonshot-v1": False,
}
#: A name holding one of these takes images whatever its prefix says ("my-llava-13b", "qwen2.5-vl-7b").
_VISION_WORD = re.compile(r"vision|[-_.]vl\b|[-_.]vl[-_.]|llava|multimodal|omni")


@functools.lru_cache(maxsize=256)
def table_vision(model: str) -> bool | None:
    """What the table says of ``model``: True (takes images), False, or None (unknown); kept per model name
    (every turn asks)."""
    name = model.lower().rsplit("/", 1)[-1]
    best = ""
    for prefix in VISION_MODELS:
        if len(prefix) > len(best) and name.startswith(prefix):
            best = prefix
    if _VISION_WORD.search(name):
        return True
    return VISION_MODELS[best] if best else None


class Vision:
    """Whether a model is sent images: ``vision`` (true, false, "auto"), the table, and the servers' refusals."""

    def __init__(self, config: Callable[[], Config]) -> None:
        self.config = config
        #: models whose server refused an image part (in this process)
        self.refused: set[str] = set()

    def allows(self, model: str) -> bool:
        """True when a photo goes to ``model`` as an image part."""
        setting = self.config().vision
        if setting is True:
            return True
        if setting is False:
            return False
        return model not in self.refused and table_vision(model) is not False

    def refuse(self, model: str) -> None:
        """The server refused an image part for ``model``: with ``vision`` "auto", none is sent to it again."""
        if model not in self.refused:
            logger.warning("the server cannot take images for model %s: photos go to it as text from now on", model)
        self.refused.add(model)


def pending(message: dict[str, Any]) -> bool:
    """True for a user message whose image has no description yet."""
    image = message.get("image")
    return isinstance(image, dict) and not isinstance(image.get("description"), str)


def image_part(jpeg: bytes) -> dict[str, Any]:
    """An OpenAI ``image_url`` content part holding the JPEG as a ``data:`` URL."""
    url = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")
    return {"type": "image_url", "image_url": {"url": url, "detail": "auto"}}


def _plain(message: dict[str, Any]) -> dict[str, Any]:
    """The message without our own keys (``image``, ``voice``): what a provider accepts."""
    return {k: v for k, v in message.items() if k not in ("image", "voice")}


def _text_of(content: Any) -> str:
    return content if isinstance(content, str) else ""


def request_messages(messages: list[dict[str, Any]], data_dir: Path,
                     send_image: bool) -> tuple[list[dict[str, Any]], bool]:
    """The rendered request with our keys removed, and the pending image of the last user message (the
    current turn's) as an image part when ``send_image``; returns it and whether an image part is in it.

    Older pending images (a turn that failed before it was described) are words: ``[image]``.
    """
    last_user = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), -1)
    out: list[dict[str, Any]] = []
    sent = False
    for i, message in enumerate(messages):
        if "image" not in message and "voice" not in message:
            out.append(message)
            continue
        plain = _plain(message)
        if pending(message):
            text = _text_of(plain.get("content"))
            current = send_image and i == last_user
            jpeg = read_image(data_dir, str(message["image"].get("file") or "")) if current else None
            if jpeg is not None:
                parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text.strip() else []
                plain["content"] = [*parts, image_part(jpeg)]
                sent = True
            elif current:
                plain["content"] = f"{FILE_GONE}\n{text}".rstrip()
            else:
                plain["content"] = f"{NOT_SHOWN if i == last_user else '[image]'}\n{text}".rstrip()
        out.append(plain)
    return out, sent


def without_images(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request with every image part replaced by :data:`NOT_SHOWN` (a server refused images)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "image_url" for p in content):
            texts = [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
            message = {**message, "content": "\n".join([NOT_SHOWN, *texts])}
        out.append(message)
    return out


def has_image(messages: list[dict[str, Any]]) -> bool:
    """True when a request carries an image part."""
    return any(isinstance(m.get("content"), list) and any(isinstance(p, dict) and p.get("type") == "image_url"
                                                         for p in m["content"]) for m in messages)


def clean_description(text: str) -> str:
    """A description as kept: one paragraph, no brackets that would end ``[image: …]``, at most
    :data:`DESCRIPTION_CHARS` characters."""
    text = " ".join((text or "").replace("[", "(").replace("]", ")").split())
    if len(text) > DESCRIPTION_CHARS:
        text = text[: DESCRIPTION_CHARS - 1].rstrip() + "…"
    return text


def described(message: dict[str, Any], description: str) -> dict[str, Any]:
    """The user message with its image replaced by words: ``[image: <description>]`` before its text."""
    text = _text_of(message.get("content"))
    image = {**message["image"], "description": description}
    content = f"[image: {description}]" + (f"\n{text}" if text.strip() else "")
    return {**message, "content": content, "image": image}


async def describe_image(llm: BaseLLM, model: str, jpeg: bytes) -> str:
    """One small call that describes an image (the one call site: usage recording, purpose ``reply``, hooks
    in here). Raises the model's error."""
    messages = [{"role": "user", "content": [{"type": "text", "text": DESCRIBE_PROMPT}, image_part(jpeg)]}]
    response = await llm.complete(messages, model=model, max_tokens=DESCRIBE_MAX_TOKENS)
    return clean_description(response.content or "")


@dataclass(slots=True)
class ImageTurn:
    """The images of one running turn: whether the image is sent, and whether the server refused it."""

    send: bool
    sent: bool = False
    refused: bool = False


def pending_messages(messages: list[CtxMessage]) -> list[CtxMessage]:
    """The context's user messages whose image has no description yet."""
    return [m for m in messages if m.message.get("role") == "user" and pending(m.message)]


__all__ = [
    "DESCRIBE_PROMPT", "ImageTurn", "NOT_SEEN", "NOT_SHOWN", "REFUSED_NOTE", "VISION_MODELS", "Vision",
    "clean_description", "describe_image", "described", "has_image", "image_part", "pending", "pending_messages",
    "request_messages", "table_vision", "without_images",
]


async def settle_images(state: Any, turn: ImageTurn, answer: str | None, *, llm: BaseLLM, model: str,
                        store: Store, data_dir: Path, vision: bool) -> int:
    """After a turn: every image still pending in the context becomes words, in the database first, then in
    the context (``state.swap_media``). Returns how many. Never raises for a failed description (it is kept as
    :data:`NOT_DESCRIBED`); a database error is raised (the turn's answer is stored already).

    ``answer`` is the turn's answer when it is a usable one; a photo without a caption takes it as its
    description. ``vision`` says whether the model may be sent images at all.
    """
    pend = pending_messages(state.messages)
    if not pend:
        return 0
    current = next((m for m in reversed(state.messages) if m.message.get("role") == "user"), None)
    done = 0
    for m in pend:
        image = m.message["image"]
        if m is current and (not turn.sent or turn.refused) or not vision:
            description = NOT_SEEN
        elif m is current and not image.get("caption") and answer:
            description = clean_description(answer)
        else:
            jpeg = read_image(data_dir, str(image.get("file") or ""))
            if jpeg is None:
                description = "the image file is no longer there"
            else:
                try:
                    async with asyncio.timeout(DESCRIBE_TIMEOUT):
                        description = await describe_image(llm, model, jpeg) or NOT_DESCRIBED
                except Exception as exc:  # noqa: BLE001 - the turn stands; the image is kept as a plain mention
                    logger.warning("session %s: the image could not be described: %s: %s", state.session_id,
                                   type(exc).__name__, exc)
                    description = NOT_DESCRIBED
        message = described(m.message, description)
        if await state.swap_media(m.seq, message):
            done += 1
    return done
