"""Whether a message is for the bot: group whitelist and triggers (prefixes, mentions, keywords, replies)."""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from core.messages import IncomingMessage

if TYPE_CHECKING:
    from config.settings import Config

logger = logging.getLogger(__name__)


def group_allowed(msg: IncomingMessage, white_list: list[str]) -> bool:
    """True when the group is in ``group_name_white_list`` (by title or chat id, or ALL_GROUP)."""
    if "ALL_GROUP" in white_list:
        return True
    return msg.group_name in white_list or msg.chat_id in white_list


def _strip_mention(text: str, bot_username: str) -> str:
    if not bot_username:
        return text
    return re.sub(rf"@{re.escape(bot_username)}\b[\s\u2005]*", "", text, flags=re.I).strip()


def triggered_text(msg: IncomingMessage, cfg: Config, bot_username: str = "") -> str | None:
    """The text to act on if the message triggers the bot, else None.

    Private chats: the text must start with one of ``single_chat_prefix`` ("" means any message), which
    is stripped. Groups: a ``group_chat_prefix`` (stripped), a ``group_chat_keyword``, an @mention of the
    bot (unless ``group_at_off``), or a reply to the bot.
    """
    text = msg.text.strip()
    if not msg.is_group:
        for prefix in cfg.single_chat_prefix:
            if text.startswith(prefix):
                return text[len(prefix):].strip()
        return None
    for prefix in cfg.group_chat_prefix:
        if prefix and text.lower().startswith(prefix.lower()):
            return _strip_mention(text[len(prefix):].strip(), bot_username)
    if msg.mentions_bot and not cfg.group_at_off:
        return _strip_mention(text, bot_username)
    if msg.reply_to_bot:
        return _strip_mention(text, bot_username)
    lowered = text.lower()
    if any(k and k.lower() in lowered for k in cfg.group_chat_keyword):
        return _strip_mention(text, bot_username)
    return None
