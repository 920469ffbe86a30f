"""What WeChat refused for a user's context token, kept until that user writes again.

WeChat takes about 10 replies per user message, within about 24 hours of it; past that, ``sendmessage``
answers ``ret -2`` and only a new message of the user brings a token that works. What is left of such a reply
or reminder is kept here, in ``<data_dir>/weixin_held/<user>/`` (the user id hashed), one owner-only JSON file
each, named by the time it was kept, so files from several processes never collide and are sent oldest
first; the receiving process sends them when the user's next message arrives (:mod:`channels.weixin.channel`).
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from pathlib import Path
from typing import Any

from config.settings import atomic_write_json

HELD_DIR = "weixin_held"


class HeldReplies:
    """The replies and reminders kept for users whose context token WeChat refused."""

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / HELD_DIR

    def folder(self, user: str) -> Path:
        """Where ``user``'s kept messages are."""
        return self.root / hashlib.sha256(user.encode()).hexdigest()[:24]

    def keep(self, user: str, text: str, kind: str) -> Path:
        """Keep ``text`` (a ``kind`` "reply" or "reminder") for ``user``'s next message."""
        folder = self.folder(user)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.json"
        atomic_write_json(path, {"user_id": user, "text": text, "kind": kind})
        return path

    def waiting(self, user: str) -> list[Path]:
        """``user``'s kept messages, oldest first."""
        folder = self.folder(user)
        return sorted(folder.glob("*.json")) if folder.is_dir() else []

    @staticmethod
    def load(path: Path) -> dict[str, Any]:
        """A kept message: ``{"user_id", "text", "kind"}``; ValueError or OSError when it cannot be read."""
        held = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(held, dict):
            raise ValueError(f"{path.name} holds no kept message")
        return held

    @staticmethod
    def rest(path: Path, held: dict[str, Any], rest: str) -> None:
        """Part of a kept message went out: keep only ``rest`` of it."""
        if rest:
            atomic_write_json(path, {**held, "text": rest})

    @staticmethod
    def sent(path: Path) -> None:
        """A kept message went out whole."""
        path.unlink(missing_ok=True)
