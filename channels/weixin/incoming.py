"""What an iLink message says, as an :class:`IncomingMessage`: its text, its photo or voice message (what fetching
it needs), the message it quotes, and the token a reply to it must carry (``extra["context_token"]``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from channels.weixin.client import FILE_ITEM, IMAGE_ITEM, TEXT_ITEM, USER_MESSAGE, VIDEO_ITEM, VOICE_ITEM
from core.messages import IncomingMessage

#: what a message that is not text is called in ``IncomingMessage.content_type``
CONTENT_TYPES = {IMAGE_ITEM: "photo", VOICE_ITEM: "voice", FILE_ITEM: "document", VIDEO_ITEM: "video"}
#: a voice item's ``encode_type`` as a file suffix (WeChat records SILK unless it says otherwise)
AUDIO_FORMATS = {1: "pcm", 2: "adpcm", 4: "speex", 5: "amr", 6: "silk", 7: "mp3", 8: "ogg"}


def to_incoming(raw: dict[str, Any], channel: str = "weixin") -> IncomingMessage | None:
    """One iLink message as an :class:`IncomingMessage`; None for the bot's own, empty and malformed ones."""
    sender = str(raw.get("from_user_id") or "")
    if not sender or raw.get("message_type", USER_MESSAGE) != USER_MESSAGE:
        return None
    listed = raw.get("item_list")
    items = [item for item in listed if isinstance(item, dict)] if isinstance(listed, list) else []
    if not items:
        return None  # nothing a person wrote (or a shape this version does not know)
    texts = [str((item.get("text_item") or {}).get("text") or "") for item in items if item.get("type") == TEXT_ITEM]
    text = "\n".join(t for t in texts if t)
    others = [item.get("type") for item in items if item.get("type") != TEXT_ITEM]
    extra: dict[str, Any] = {"context_token": str(raw.get("context_token") or "")}
    media = media_of(items)
    if media is not None:  # a photo (any text beside it is its caption) or a voice message: fetched later
        content_type, found = media
        extra.update(found)
    else:
        content_type = "text" if text or not others else CONTENT_TYPES.get(others[0], "other")
    quoted = next((item["ref_msg"] for item in items if isinstance(item.get("ref_msg"), dict)), {})
    quoted_item = quoted.get("message_item") if isinstance(quoted.get("message_item"), dict) else {}
    reply_to_text = str((quoted_item.get("text_item") or {}).get("text") or quoted.get("title") or "")
    # a uint64: Python's json reads it exactly, so str() keeps every digit
    message_id = raw.get("message_id") or raw.get("seq") or raw.get("client_id") or ""
    created = raw.get("create_time_ms")
    when = datetime.fromtimestamp(created / 1000, UTC) if isinstance(created, int | float) and created > 0 \
        else datetime.now(UTC)
    return IncomingMessage(channel=channel, chat_id=sender, user_id=sender, text=text, message_id=str(message_id),
                           time=when, content_type=content_type, reply_to_text=reply_to_text, extra=extra)


def media_of(items: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """A message's photo or voice message as (content type, what fetching it needs, for
    ``IncomingMessage.extra``); None when it has neither. A photo whose reference cannot be fetched is still a
    photo (its download fails: a short note)."""
    for item in items:
        kind = item.get("type")
        if kind == IMAGE_ITEM:
            image = item.get("image_item") if isinstance(item.get("image_item"), dict) else {}
            ref = _media_ref(image.get("media"))
            if ref is not None:
                return "photo", {"media": ref, "aeskey": str(image.get("aeskey") or "")}
        elif kind == VOICE_ITEM:
            voice = item.get("voice_item") if isinstance(item.get("voice_item"), dict) else {}
            audio = AUDIO_FORMATS.get(voice.get("encode_type"), "silk")
            return "voice", {"media": _media_ref(voice.get("media")) or {},
                             "transcript": str(voice.get("text") or "").strip(), "audio_format": audio}
    return None


def _media_ref(media: Any) -> dict[str, str] | None:
    """The parts of a CDN media reference a download needs; None without a download parameter."""
    if not isinstance(media, dict) or not (media.get("encrypt_query_param") or media.get("full_url")):
        return None
    return {key: str(media[key]) for key in ("encrypt_query_param", "aes_key", "full_url") if media.get(key)}
