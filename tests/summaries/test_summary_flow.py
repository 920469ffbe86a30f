"""End to end: trims through the real OpenAI client and a fake HTTP model, summaries injected and on disk."""

from __future__ import annotations

import re
from pathlib import Path

from agent.context import injection_text
from agent.llm import OpenAILLM
from agent.loop import Agent
from agent.sessions import LiveSessions, SessionManager
from agent.tools.base import ToolRegistry
from config.settings import Config, ConfigHolder
from core.records import SessionInfo
from memory.daily import DailyMemory
from store.store import Store
from summaries.summarizer import Summarizer
from summaries.text import SUMMARY_SYSTEM_PROMPT
from tests.fakes.openai_server import FakeOpenAIServer, message_text

SESSION = SessionInfo(session_id="telegram:4242", channel="telegram", chat_id="4242", user_id="4242")


def summary_responder(body: dict) -> str | None:
    """Answer summary requests with one bullet per summarised user line."""
    messages = body["messages"]
    if message_text(messages[0]) != SUMMARY_SYSTEM_PROMPT:
        return None  # a chat request: the default echo
    text = message_text(messages[1])
    users = [line[len("User: "):] for line in text.split("Conversation:\n", 1)[1].splitlines()
             if line.startswith("User: ")]
    return "\n".join(f"- summary bullet: {u}" for u in users)


async def test_trimmed_turns_are_summarised_injected_and_written(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        server.responder = summary_responder
        config = ConfigHolder(Config(data_dir=str(tmp_path), timezone="UTC", model="chat-model",
                                     summary_model="summary-model", agent_max_context_turns=4))
        store = Store(config().database_url())
        await store.open()
        llm = OpenAILLM(api_key="test", base_url=server.base_url, model="chat-model")
        daily = DailyMemory(tmp_path / "memory", config().zone())
        live = LiveSessions(store)
        summarizer = Summarizer(store=store, llm=llm, config=config, sessions=live, daily=daily)
        sessions = SessionManager(store, config, summarizer, live=live)
        agent = Agent(llm=llm, tools=ToolRegistry(), store=store, config=config, sink=summarizer)
        try:
            await summarizer.start()
            state = await sessions.get(SESSION)
            for i in range(8):
                async with state.lock:
                    await state.add_user({"role": "user", "content": f"message {i}"})
                    result = await agent.run_turn(state)
                assert result.text == f"echo: message {i}"
            assert await summarizer.drain(5)
            async with state.lock:
                await state.add_user({"role": "user", "content": "message 8"})
                await agent.run_turn(state)
            assert await summarizer.drain(5)
        finally:
            await llm.close()
            await store.close()

        requests = server.requests
        summary_requests = [r for r in requests if message_text(r["messages"][0]) == SUMMARY_SYSTEM_PROMPT]
        chat_requests = [r for r in requests if r not in summary_requests]
        # turns 4, 6 and 8 each dropped the two oldest turns
        assert len(summary_requests) == 3 and len(chat_requests) == 9
        for r in summary_requests:
            assert r["model"] == "summary-model" and r["temperature"] == 0 and "tools" not in r
        rolled = "\n".join(f"- summary bullet: message {i}" for i in range(4))
        last = chat_requests[-1]["messages"]
        assert last[1] == {"role": "user", "content": injection_text(rolled, 4, "message 6")}
        assert [message_text(m) for m in last if m["role"] == "user"][1:] == ["message 7", "message 8"]

        text = (tmp_path / "memory" / "telegram_4242" / f"{daily.today()}.md").read_text(encoding="utf-8")
        # each section holds what is new in its turns: no bullet is written twice
        expected = (
            r"# Daily Memory: \d{4}-\d{2}-\d{2}\n"
            r"\n## Trimmed Context \(\d\d:\d\d\)\n\n- summary bullet: message 0\n- summary bullet: message 1\n"
            r"\n## Trimmed Context \(\d\d:\d\d\)\n\n- summary bullet: message 2\n- summary bullet: message 3\n"
            r"\n## Trimmed Context \(\d\d:\d\d\)\n\n- summary bullet: message 4\n- summary bullet: message 5\n"
        )
        assert re.fullmatch(expected, text), text
