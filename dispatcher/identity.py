"""Session identity (DESIGN §1.3), derived in this one place from an incoming message and the config.

- private chat: ``<channel>:<chat id>``;
- group with ``group_shared_session``: ``<channel>:group:<chat id>``, owned by no single member (empty
  ``user_id``);
- group without it: ``<channel>:group:<chat id>:<user id>``, never the member's private session.

Channels whose platform ids are unstable (WeChat) put a stable name in ``chat_id``/``user_id`` already.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from core.messages import IncomingMessage
from core.records import SessionInfo

if TYPE_CHECKING:
    from config.settings import Config

logger = logging.getLogger(__name__)


def session_for(msg: IncomingMessage, cfg: Config) -> SessionInfo:
    """The session ``msg`` belongs to under ``cfg.group_shared_session``: id, owner and title."""
    if not msg.is_group:
        session_id, user_id = f"{msg.channel}:{msg.chat_id}", msg.user_id
    elif cfg.group_shared_session:
        session_id, user_id = f"{msg.channel}:group:{msg.chat_id}", ""
    else:
        session_id, user_id = f"{msg.channel}:group:{msg.chat_id}:{msg.user_id}", msg.user_id
    return SessionInfo(session_id=session_id, channel=msg.channel, chat_id=msg.chat_id, user_id=user_id,
                       is_group=msg.is_group, title=msg.group_name or msg.user_name)
