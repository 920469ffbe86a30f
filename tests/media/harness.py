"""A bot for the photo and voice tests: the real Telegram channel (polling the fake Bot API), the real dispatcher
and agent, the real ``openai`` SDK against the fake OpenAI server, and a real database."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

from PIL import Image
from sqlalchemy import text

from agent.llm import OpenAILLM
from agent.loop import Agent
from agent.sessions import LoggingDropSink, SessionManager
from agent.tokens import TokenCounters
from agent.tools.base import ToolRegistry
from channels.telegram.channel import TelegramChannel
from config.settings import Config, ConfigHolder
from dispatcher.dispatcher import Dispatcher
from store.store import Store
from store.usage import UsageStore
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_api import FakeTelegramAPI
from usage.caps import UsageCaps
from usage.recorder import UsageRecorder


def jpeg(width: int = 2000, height: int = 1500, color: str = "red") -> bytes:
    """A photo as a phone sends it: several megapixels of JPEG."""
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, "JPEG", quality=90)
    return out.getvalue()


#: An OGG/Opus voice note's first bytes (the capture pattern and an OpusHead page), as Telegram serves them.
OGG_VOICE = (b"OggS\x00\x02" + bytes(20) + b"\x01\x13OpusHead\x01\x01\x38\x01\x80\xbb\x00\x00\x00\x00\x00"
             + b"OggS\x00\x00" + bytes(100))


def image_parts(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every ``image_url`` part of a chat request."""
    return [p for m in body.get("messages") or [] if isinstance(m.get("content"), list)
            for p in m["content"] if isinstance(p, dict) and p.get("type") == "image_url"]


def decoded(part: dict[str, Any]) -> Image.Image:
    """The image an ``image_url`` data URL holds."""
    url = part["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")
    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))


class MediaBot:
    """Telegram (polling) -> dispatcher -> agent -> fake OpenAI server, on a real store."""

    def __init__(self, api: FakeTelegramAPI, srv: FakeOpenAIServer, db_url: str, tmp_path, **settings: Any) -> None:
        self.api, self.srv, self.tmp_path = api, srv, tmp_path
        self.config = ConfigHolder(Config(
            data_dir=str(tmp_path), channel_type="telegram", telegram_bot_token=api.token,
            telegram_base_url=api.base_url, telegram_rate_limit=False, telegram_mode="polling",
            open_ai_api_base=srv.base_url, open_ai_api_key="k", model=settings.pop("model", "gpt-4o-mini"),
            **settings))
        self.store = Store(db_url)

    async def __aenter__(self) -> MediaBot:
        await self.store.open()
        cfg = self.config()
        self.llm = OpenAILLM(api_key="k", base_url=cfg.open_ai_api_base, model=cfg.model, retry_base_delay=0.01)
        usage = UsageStore(self.store)
        self.llm.usage = UsageRecorder(usage, TokenCounters())  # as app.py wires it
        sink = LoggingDropSink()
        self.sessions = SessionManager(self.store, self.config, sink)
        self.agent = Agent(llm=self.llm, tools=ToolRegistry(), store=self.store, config=self.config, sink=sink)
        self.dispatcher = Dispatcher(config=self.config, store=self.store, agent=self.agent, sessions=self.sessions,
                                     caps=UsageCaps(usage, self.config))
        self.channel = TelegramChannel(cfg, poll_timeout=1)
        self.dispatcher.add_channel(self.channel)
        await self.channel.start()
        assert self.channel.active
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.dispatcher.drain(5)
        await self.channel.stop()
        await self.llm.close()
        await self.store.close()

    async def answered(self, chat_id: int, n: int, wait: float = 20.0) -> list[str]:
        """Wait until the chat shows ``n`` bot messages and the bot is idle; the chat's texts."""
        await self.api.wait_for(lambda: len(self.api.chat_texts(chat_id)) >= n, timeout=wait)
        await self.dispatcher.wait_idle()
        return self.api.chat_texts(chat_id)

    async def stored(self, session_id: str) -> list[dict[str, Any]]:
        """The session's stored messages, as the database holds them."""
        return [m.message for m in await self.store.sessions.load_messages(session_id)]

    async def raw_contents(self) -> list[str]:
        """Every stored message's content column as text (what a reader of the database sees)."""
        rows = await self.store.run(lambda conn: conn.execute(text("SELECT content FROM messages ORDER BY id")).all())
        return [row[0] if isinstance(row[0], str) else json.dumps(row[0]) for row in rows]
