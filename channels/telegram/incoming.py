"""Reading Telegram's updates: PTB messages become :class:`IncomingMessage` values, and an update PTB cannot
parse is skipped (logged once, by id) instead of wedging intake.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from telegram import Message, MessageEntity, Update

from channels.telegram.request import AiohttpRequest
from core.messages import IncomingMessage

logger = logging.getLogger(__name__)

#: Attachment kinds, in the order they are checked (animation before document: a GIF is both).
CONTENT_KINDS: tuple[str, ...] = (
    "sticker", "photo", "voice", "video_note", "video", "animation", "audio", "document", "location", "venue",
    "contact", "poll", "dice", "game", "story", "invoice", "paid_media",
)
#: Service messages (members joining, pins, ...) are not conversation and are not delivered.
SERVICE_FIELDS: tuple[str, ...] = (
    "new_chat_members", "left_chat_member", "new_chat_title", "new_chat_photo", "delete_chat_photo",
    "group_chat_created", "supergroup_chat_created", "channel_chat_created", "migrate_to_chat_id",
    "migrate_from_chat_id", "pinned_message", "message_auto_delete_timer_changed", "forum_topic_created",
    "forum_topic_edited", "forum_topic_closed", "forum_topic_reopened", "video_chat_started",
    "video_chat_ended", "video_chat_scheduled", "video_chat_participants_invited", "write_access_allowed",
)
def skip_malformed(updates: list[Any]) -> list[Any]:
    """Replace every raw update PTB cannot parse by a bare ``{"update_id": ...}``, logging it once.

    The bare update still moves the polling offset past the bad one; dropping it instead would fetch it
    again on every poll, and PTB would then discard the whole batch, forever.
    """
    out: list[Any] = []
    for raw in updates:
        try:
            Update.de_json(raw, None)
        except Exception as exc:  # noqa: BLE001 - whatever PTB raises on data it cannot read
            update_id = raw.get("update_id") if isinstance(raw, dict) else None
            if not isinstance(update_id, int):
                logger.warning("telegram: an update without an id could not be read (%s); dropped",
                               type(exc).__name__)
                continue
            logger.warning("telegram: update %d could not be read (%s: %.200s); skipped", update_id,
                           type(exc).__name__, exc)
            raw = {"update_id": update_id}
        out.append(raw)
    return out


class UpdatesRequest(AiohttpRequest):
    """The request object for ``getUpdates``: it hands PTB only updates PTB can parse, and polls again
    (which confirms the previous batch to Telegram) only once ``before_poll`` returns."""

    before_poll: Any = None

    async def do_request(self, *args: Any, **kwargs: Any) -> Any:
        """Wait for ``before_poll`` (the previous batch is journalled), then poll."""
        if self.before_poll is not None:
            await self.before_poll()
        return await super().do_request(*args, **kwargs)

    def parse_json_payload(self, payload: bytes) -> Any:
        """Parse the answer, and replace each update PTB cannot read (see :func:`skip_malformed`)."""
        data = super().parse_json_payload(payload)
        result = data.get("result") if isinstance(data, dict) else None
        if isinstance(result, list) and result:
            data["result"] = skip_malformed(result)
        return data


def to_incoming(message: Message, *, channel: str, bot_id: int | None,
                bot_username: str) -> IncomingMessage | None:
    """Turn a PTB message into an :class:`IncomingMessage`, or None for a service message."""
    chat = message.chat
    text = message.text if message.text is not None else (message.caption or "")
    content_type = "text" if message.text is not None else ""
    if not content_type:
        content_type = next((kind for kind in CONTENT_KINDS if getattr(message, kind, None)), "")
    if not content_type:
        if any(getattr(message, name, None) for name in SERVICE_FIELDS):
            return None
        content_type = "other"
    sender = message.from_user
    if sender is not None:
        user_id, user_name = str(sender.id), sender.full_name or sender.username or ""
    elif message.sender_chat is not None:
        user_id, user_name = str(message.sender_chat.id), message.sender_chat.title or ""
    else:
        user_id, user_name = str(chat.id), ""
    replied = message.reply_to_message
    reply_to_bot = bool(replied and replied.from_user and replied.from_user.id == bot_id)
    reply_to_name, reply_to_text = ("", "") if reply_to_bot else _replied(message, sender)
    extra: dict[str, Any] = {}
    if message.is_topic_message and message.message_thread_id:
        extra["thread_id"] = message.message_thread_id
    extra.update(media_reference(message, content_type))
    return IncomingMessage(
        channel=channel, chat_id=str(chat.id), user_id=user_id, text=text, user_name=user_name,
        is_group=chat.type in ("group", "supergroup"), group_name=chat.title or "",
        mentions_bot=_mentions_bot(message, text, bot_id, bot_username), reply_to_bot=reply_to_bot,
        message_id=f"{chat.id}:{message.message_id}", time=message.date, content_type=content_type,
        is_from_bot=sender is not None and (sender.is_bot or sender.id == bot_id), extra=extra,
        reply_to_text=reply_to_text, reply_to_name=reply_to_name,
    )


#: The Bot API serves files up to this size through getFile.
MAX_FILE_BYTES = 20 * 1024 * 1024


def media_reference(message: Message, content_type: str) -> dict[str, Any]:
    """What fetching a photo or voice note needs later (``file_id``), kept in ``IncomingMessage.extra``: the
    largest size of a photo that the Bot API will serve, or the voice note itself."""
    if content_type == "photo" and message.photo:
        sizes = [p for p in message.photo if not p.file_size or p.file_size <= MAX_FILE_BYTES] or list(message.photo)
        best = max(sizes, key=lambda p: p.width * p.height)
        return {"file_id": best.file_id, "file_size": best.file_size or 0}
    if content_type == "voice" and message.voice is not None:
        return {"file_id": message.voice.file_id, "file_size": message.voice.file_size or 0}
    found: dict[str, Any] = {}
    if content_type == "document" and message.document is not None:
        found.update(document_reference(message.document))
    replied = message.reply_to_message
    if replied is not None and replied.document is not None:  # ``/kb add`` as a reply to a document
        found["reply_document"] = document_reference(replied.document)
    return found


def document_reference(document: Any) -> dict[str, Any]:
    """What fetching a document needs (``/kb add``): its id, declared size, file name and type."""
    return {"file_id": document.file_id, "file_size": document.file_size or 0,
            "file_name": document.file_name or "", "mime_type": document.mime_type or ""}


def _replied(message: Message, sender: Any) -> tuple[str, str]:
    """The author and text of the message this one replies to, when that is someone else's; else ("", "").

    A quoted part (Telegram's "quote") stands for the whole message. A topic's creation message, which
    every message of a forum topic formally replies to, has no text and so gives nothing.
    """
    replied = message.reply_to_message
    if replied is None:
        return "", ""
    author = replied.from_user
    if author is not None and sender is not None and author.id == sender.id:
        return "", ""
    text = (message.quote.text if message.quote else "") or replied.text or replied.caption or ""
    if author is not None:
        name = author.full_name or author.username or str(author.id)
    else:
        name = replied.sender_chat.title if replied.sender_chat is not None else ""
    return (name, text) if text else ("", "")


def _mentions_bot(message: Message, text: str, bot_id: int | None, bot_username: str) -> bool:
    """True when the message mentions the bot (an entity, or its @name in the text)."""
    name = bot_username.lower()
    entities = message.parse_entities() if message.text is not None else message.parse_caption_entities()
    for entity, value in entities.items():
        if entity.type == MessageEntity.MENTION and name and value.lower() == "@" + name:
            return True
        if entity.type == MessageEntity.TEXT_MENTION and entity.user and entity.user.id == bot_id:
            return True
    return bool(name) and re.search(rf"@{re.escape(name)}\b", text, re.IGNORECASE) is not None


__all__ = ["CONTENT_KINDS", "SERVICE_FIELDS", "UpdatesRequest", "skip_malformed", "to_incoming"]
