"""The token budget with photos (DESIGN §5.1, §2.1): an image counts at the provider's rate while it is an image,
thirty photos in one chat never push a request over the budget, and a restart brings back words only."""

from __future__ import annotations

import asyncio

from agent.images import DESCRIBE_PROMPT
from agent.llm import OpenAILLM
from agent.loop import Agent
from agent.sessions import LoggingDropSink, SessionManager
from agent.tokens import MESSAGE_OVERHEAD, TokenCounter
from agent.tools.base import ToolRegistry
from config.settings import Config, ConfigHolder
from core.records import SessionInfo
from media.files import save_image
from store.store import Store
from tests.fakes.openai_server import FakeOpenAIServer, message_text
from tests.media.harness import image_parts, jpeg

INFO = SessionInfo(session_id="telegram:77", channel="telegram", chat_id="77", user_id="77")
#: What OpenAI charges for one of these photos (2000 x 1500, kept at 1154 x 866: four 512-pixel tiles).
PHOTO_TOKENS = 765


def request_tokens(counter: TokenCounter, body: dict) -> int:
    """Our count of a request's messages, each image part at the provider's rate."""
    total = 0
    for m in body["messages"]:
        content = m.get("content")
        texts = content if isinstance(content, str) else "".join(
            p.get("text", "") for p in content if p.get("type") == "text")
        total += MESSAGE_OVERHEAD + counter.count_text(texts)
    return total + PHOTO_TOKENS * len(image_parts(body))


def describer(body: dict) -> str:
    first = body["messages"][0]
    if first["role"] == "user" and DESCRIBE_PROMPT in message_text(first):
        return "a photo of a plain coloured square, like the others"
    return "A nice photo; thank you for sharing it with me."


async def test_thirty_photos_stay_within_the_budget_and_a_restart_restores_words(db_url, tmp_path):
    caption = "Here is another picture from my holiday by the sea; " * 6  # about 70 tokens
    with FakeOpenAIServer(model="gpt-4o") as srv:
        srv.responder = describer
        store = Store(db_url)
        await store.open()
        holder = ConfigHolder(Config(data_dir=str(tmp_path), model="gpt-4o", agent_max_context_tokens=2_000,
                                     agent_max_context_turns=40, character_desc="You are helpful."))
        llm = OpenAILLM(api_key="k", base_url=srv.base_url, model="gpt-4o", retry_base_delay=0.01)
        try:
            sink = LoggingDropSink()
            agent = Agent(llm=llm, tools=ToolRegistry(), store=store, config=holder, sink=sink)
            sessions = SessionManager(store, holder, sink)
            state = await sessions.get(INFO)
            counter = agent.counter("gpt-4o")
            photo = jpeg()
            for n in range(30):
                saved = await asyncio.to_thread(save_image, tmp_path, INFO.session_id, photo, "photo")
                assert saved.tokens == PHOTO_TOKENS
                message = {"role": "user", "content": f"{caption}#{n}",
                           "image": {"file": saved.file, "width": saved.width, "height": saved.height,
                                     "tokens": saved.tokens, "caption": True}}
                async with state.lock:
                    await state.add_user(message)
                    assert counter.count_message(message) > PHOTO_TOKENS  # pending: counted as an image
                    result = await agent.run_turn(state)
                assert result.outcome == "ok"
                budget = agent.budget(state, agent.system_prompt(state))
                assert sum(counter.count_message(m.message) for m in state.messages) <= budget.max_tokens
            turns = [r for r in srv.requests if DESCRIBE_PROMPT not in message_text(r["messages"][0])]
            assert len(turns) == 30
            limit = holder().agent_max_context_tokens
            for body in turns:
                assert len(image_parts(body)) == 1  # this turn's photo, never an earlier one
                assert request_tokens(counter, body) <= limit
            assert state.context_start_seq > 30  # turns were trimmed to fit (each turn stores 2 messages)
            # The stored history: words only.
            stored = [m.message for m in await store.sessions.load_messages(INFO.session_id)]
            users = [m for m in stored if m["role"] == "user"]
            assert len(users) == 30 and all(m["content"].startswith("[image: a photo of a plain") for m in users)
            assert all(isinstance(m["content"], str) and "base64" not in m["content"] for m in stored)
            # A restart: a new process's sessions restore the last turns as words.
            restored = await SessionManager(store, holder, sink).get(INFO)
            assert restored.messages
            for m in restored.messages:
                assert isinstance(m.message["content"], str) and "base64" not in m.message["content"]
                if m.message["role"] == "user":
                    assert m.message["content"].startswith("[image: ")
                    assert counter.count_message(m.message) < PHOTO_TOKENS  # words, not an image
        finally:
            await llm.close()
            await store.close()
