"""The daily caps (usage/caps.py) through the dispatcher, the real client and the fake model server: each cap
refuses with its sentence or falls back, resets at midnight in the configured zone, spares admins; ``/usage``
gives exact figures; a summary runs past a cap and is counted."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import time_machine
from sqlalchemy import select

from agent.llm import OpenAILLM
from agent.sessions import LiveSessions
from core.records import SessionInfo
from memory.daily import DailyMemory
from store.models import UsageRow
from summaries.summarizer import Summarizer
from tests.fakes.openai_server import FakeOpenAIServer
from tests.plugins.harness import PluginBot

MODEL = "chat-model"
CHEAP = "cheap-model"
BERLIN = ZoneInfo("Europe/Berlin")
#: 22:30 in Berlin: the caps reset in 1 h 30 min
EVENING = datetime(2026, 11, 26, 22, 30, tzinfo=BERLIN)
AFTER_MIDNIGHT = datetime(2026, 11, 27, 0, 0, 30, tzinfo=BERLIN)
#: one answer's usage: 160 tokens
U160 = {"prompt_tokens": 100, "completion_tokens": 60, "prompt_tokens_details": {"cached_tokens": 40}}
RESET = "00:00 Europe/Berlin, in 1 h 30 min"
PERSON = f"You have used your daily limit of 150 tokens; it resets at midnight ({RESET})."
GROUP = f"This group has used its daily limit of 150 tokens; it resets at midnight ({RESET})."
BOT = f"The bot has used its daily limit of 150 tokens for everyone; it resets at midnight ({RESET})."


@pytest.fixture
def server() -> FakeOpenAIServer:
    with FakeOpenAIServer(model=MODEL) as fake:
        yield fake


@contextlib.asynccontextmanager
async def capped_bot(tmp_path: Path, server: FakeOpenAIServer, db_url: str, **settings) -> AsyncIterator[PluginBot]:
    llm = OpenAILLM(api_key="test", base_url=server.base_url, model=MODEL, retry_base_delay=0.01)
    try:
        async with PluginBot(tmp_path, llm=llm, model=MODEL, db_url=db_url, timezone="Europe/Berlin",
                             **settings) as bot:
            yield bot
    finally:
        await llm.close()


async def usage_rows(bot: PluginBot) -> list[tuple]:
    def read(conn):
        c = UsageRow.__table__.c
        return [tuple(r) for r in conn.execute(select(c.session_id, c.user_id, c.model, c.purpose, c.prompt_tokens,
                                                      c.completion_tokens, c.cached_tokens).order_by(c.id))]
    return await bot.store.run(read)


async def test_a_turn_with_tool_calls_is_one_row_per_model_call(tmp_path, server, db_url):
    with time_machine.travel(EVENING, tick=False):
        async with capped_bot(tmp_path, server, db_url) as bot:
            server.enqueue_tool_calls([("current_time", "{}")], usage={"prompt_tokens": 300, "completion_tokens": 12})
            server.enqueue_text("It is 22:30.", usage={"prompt_tokens": 330, "completion_tokens": 8,
                                                       "prompt_tokens_details": {"cached_tokens": 256}})
            assert await bot.say("what time is it?") == "It is 22:30."
            assert await usage_rows(bot) == [("telegram:100", "telegram:100", MODEL, "reply", 300, 12, 0),
                                             ("telegram:100", "telegram:100", MODEL, "reply", 330, 8, 256)]


async def test_the_person_cap_refuses_then_resets_at_midnight_in_the_zone(tmp_path, server, db_url):
    with time_machine.travel(EVENING, tick=False) as traveller:
        async with capped_bot(tmp_path, server, db_url, usage_cap_user_daily_tokens=150) as bot:
            server.enqueue_text("Hello.", usage=U160)
            assert await bot.say("hi") == "Hello."
            assert await bot.say("again?") == PERSON
            assert len(server.requests) == 1  # the refused turn never reached the model
            # the message stays stored, and it is answered (by the sentence), so it is not answered later
            history = [m.message["content"] for m in await bot.store.sessions.load_messages("telegram:100")]
            assert history == ["hi", "Hello.", "again?"]
            assert await bot.store.journal.pending() == []
            # the cap is the person's across chats: their group session is refused too, others are not
            assert await bot.say("@bot hi", is_group=True, chat_id="-5") == PERSON
            server.enqueue_text("Hi Bob.")
            assert await bot.say("hello", chat_id="200", user_id="200", user_name="Bob") == "Hi Bob."
            traveller.move_to(datetime(2026, 11, 26, 23, 59, 0, tzinfo=BERLIN))
            assert await bot.say("still?") == PERSON.replace(RESET, "00:00 Europe/Berlin, in 1 min")
            traveller.move_to(AFTER_MIDNIGHT)
            server.enqueue_text("Good morning.")
            assert await bot.say("morning") == "Good morning."


async def test_the_group_cap_counts_every_member_session_of_the_group(tmp_path, server, db_url):
    with time_machine.travel(EVENING, tick=False) as traveller:
        async with capped_bot(tmp_path, server, db_url, usage_cap_group_daily_tokens=150) as bot:
            server.enqueue_text("Hello Alice.", usage=U160)
            assert await bot.say("@bot hi", is_group=True, chat_id="-5") == "Hello Alice."
            assert await bot.say("@bot me too", is_group=True, chat_id="-5", user_id="200", user_name="Bob") == GROUP
            server.enqueue_text("Hello in private.")
            assert await bot.say("hi") == "Hello in private."  # a private chat is no group
            server.enqueue_text("Hello other group.")
            assert await bot.say("@bot hi", is_group=True, chat_id="-6") == "Hello other group."
            traveller.move_to(AFTER_MIDNIGHT)
            server.enqueue_text("Morning, Bob.")
            assert await bot.say("@bot now?", is_group=True, chat_id="-5", user_id="200") == "Morning, Bob."


async def test_the_bot_cap_refuses_everyone_but_admins(tmp_path, server, db_url):
    with time_machine.travel(EVENING, tick=False) as traveller:
        async with capped_bot(tmp_path, server, db_url, usage_cap_daily_tokens=150,
                              admin_users=["telegram:900"]) as bot:
            server.enqueue_text("Hello.", usage=U160)
            assert await bot.say("hi") == "Hello."
            assert await bot.say("hi", chat_id="200", user_id="200", user_name="Bob") == BOT
            server.enqueue_text("Yes, boss.")
            assert await bot.say("status?", chat_id="900", user_id="900", user_name="Op") == "Yes, boss."
            server.enqueue_text("From the terminal.")
            assert await bot.say("hi", terminal=True) == "From the terminal."  # the terminal's user is an admin
            assert len(server.requests) == 3
            traveller.move_to(AFTER_MIDNIGHT)
            server.enqueue_text("Morning, Bob.")
            assert await bot.say("hi", chat_id="200", user_id="200", user_name="Bob") == "Morning, Bob."


async def test_admins_are_exempt_from_the_person_cap(tmp_path, server, db_url):
    with time_machine.travel(EVENING, tick=False):
        async with capped_bot(tmp_path, server, db_url, usage_cap_user_daily_tokens=150,
                              admin_users=["telegram:100"]) as bot:
            for text in ("one", "two"):
                server.enqueue_text(f"Answer {text}.", usage=U160)
                assert await bot.say(text) == f"Answer {text}."
            assert "You are an admin: the caps do not apply to you." in await bot.say("/usage")


@pytest.mark.parametrize("cap", ["usage_cap_user_daily_tokens", "usage_cap_group_daily_tokens",
                                 "usage_cap_daily_tokens"])
async def test_over_each_cap_the_turn_runs_on_the_fallback_model(tmp_path, server, db_url, cap):
    with time_machine.travel(EVENING, tick=False):
        async with capped_bot(tmp_path, server, db_url, usage_fallback_model=CHEAP, **{cap: 150}) as bot:
            server.enqueue_text("Hello.", usage=U160)
            assert await bot.say("@bot hi", is_group=True, chat_id="-5") == "Hello."
            server.enqueue_text("Cheaper hello.", usage={"prompt_tokens": 90, "completion_tokens": 5})
            assert await bot.say("@bot again", is_group=True, chat_id="-5") == "Cheaper hello."
            assert [r["model"] for r in server.requests] == [MODEL, CHEAP]
            assert [(r[2], r[4]) for r in await usage_rows(bot)] == [(MODEL, 100), (CHEAP, 90)]


async def test_usage_figures_are_exact(tmp_path, server, db_url):
    with time_machine.travel(datetime(2026, 11, 25, 12, 0, tzinfo=BERLIN), tick=False) as traveller:
        async with capped_bot(tmp_path, server, db_url, usage_cap_user_daily_tokens=1000,
                              usage_cap_group_daily_tokens=5000) as bot:
            server.enqueue_text("Yesterday.", usage={"prompt_tokens": 200, "completion_tokens": 20})
            assert await bot.say("@bot hi", is_group=True, chat_id="-5") == "Yesterday."
            traveller.move_to(EVENING)
            server.enqueue_text("Today.", usage=U160)
            assert await bot.say("@bot hi", is_group=True, chat_id="-5") == "Today."
            server.enqueue_text("Bob's.", usage={"prompt_tokens": 50, "completion_tokens": 10})
            assert await bot.say("@bot hi", is_group=True, chat_id="-5", user_id="200", user_name="Bob") == "Bob's."
            server.enqueue_text("Private.", usage={"prompt_tokens": 30, "completion_tokens": 3})
            assert await bot.say("hi") == "Private."
            # an earlier month counts for neither figure
            traveller.move_to(datetime(2026, 10, 31, 23, 0, tzinfo=BERLIN))
            server.enqueue_text("October.", usage={"prompt_tokens": 500, "completion_tokens": 1})
            assert await bot.say("@bot hi", is_group=True, chat_id="-5") == "October."
            traveller.move_to(EVENING)
            assert await bot.say("/usage", is_group=True, chat_id="-5") == "\n".join([
                "Tokens used today (2026-11-26) and this month (November 2026), days in Europe/Berlin:",
                "This group: 220 today of a daily cap of 5,000 (4,780 left), 440 this month",
                "• chat-model: 220 today, 440 this month (3 calls, 40 of its prompt tokens cached)",
                "You: 193 today of a daily cap of 1,000 (807 left), 413 this month",
                "• chat-model: 193 today, 413 this month (3 calls, 40 of its prompt tokens cached)",
                f"Over a cap, messages are not answered until the caps reset at {RESET}.",
            ])
            assert await bot.say("/usage", chat_id="300", user_id="300") == "\n".join([
                "Tokens used today (2026-11-26) and this month (November 2026), days in Europe/Berlin:",
                "This chat: 0 today, 0 this month",
                "You: 0 today of a daily cap of 1,000 (1,000 left), 0 this month",
                f"Over a cap, messages are not answered until the caps reset at {RESET}.",
            ])


async def test_usage_without_caps_says_so_and_shows_the_whole_bot_only_with_its_cap(tmp_path, server, db_url):
    with time_machine.travel(EVENING, tick=False):
        async with capped_bot(tmp_path, server, db_url) as bot:
            server.enqueue_text("Hello.", usage=U160)
            await bot.say("hi")
            assert await bot.say("/usage") == "\n".join([
                "Tokens used today (2026-11-26) and this month (November 2026), days in Europe/Berlin:",
                "This chat: 160 today, 160 this month",
                "• chat-model: 160 today, 160 this month (1 call, 40 of its prompt tokens cached)",
                "You: 160 today, 160 this month",
                "• chat-model: 160 today, 160 this month (1 call, 40 of its prompt tokens cached)",
                "No daily caps are set.",
            ])
        async with capped_bot(tmp_path, server, db_url, usage_cap_daily_tokens=100,
                              usage_fallback_model=CHEAP) as bot:
            lines = (await bot.say("/usage", chat_id="200", user_id="200")).splitlines()
            assert lines[-2:] == ["The whole bot: 160 today of a daily cap of 100 (reached)",
                                  f"Over a cap, answers come from {CHEAP} until the caps reset at {RESET}."]


async def test_a_summary_runs_past_a_cap_and_is_counted(tmp_path, server, db_url):
    with time_machine.travel(EVENING, tick=False):
        async with capped_bot(tmp_path, server, db_url, usage_cap_daily_tokens=150) as bot:
            server.enqueue_text("Hello.", usage=U160)
            assert await bot.say("my cat is Tom") == "Hello."
            assert await bot.say("and my dog?") == BOT
            summarizer = Summarizer(store=bot.store, llm=bot.llm, config=bot.holder,
                                    sessions=LiveSessions(bot.store),
                                    daily=DailyMemory(tmp_path / "memory", BERLIN))
            await bot.store.sessions.ensure(SessionInfo("telegram:100", "telegram", "100", "100"))
            server.enqueue_text("- The user's cat is Tom.", usage={"prompt_tokens": 70, "completion_tokens": 9})
            assert await summarizer.summarize_now("telegram:100", "compact", 1, 2) == "- The user's cat is Tom."
            assert (await usage_rows(bot))[-1] == ("telegram:100", "", MODEL, "summary", 70, 9, 0)


async def test_a_flush_before_a_trim_is_its_own_row_in_the_turn(tmp_path, server, db_url):
    with time_machine.travel(EVENING, tick=False):
        async with capped_bot(tmp_path, server, db_url, agent_max_context_turns=2, memory_flush=True) as bot:
            for i in range(2):
                server.enqueue_text(f"a{i}", usage={"prompt_tokens": 10, "completion_tokens": 1})
                assert await bot.say(f"q{i}") == f"a{i}"
            server.enqueue_tool_calls([("memory_write", '{"text": "The user asked q0."}')],
                                      usage={"prompt_tokens": 44, "completion_tokens": 7})
            server.enqueue_text("a2", usage={"prompt_tokens": 12, "completion_tokens": 1})
            assert await bot.say("q2") == "a2"
            assert [r[1:6] for r in await usage_rows(bot)] == [
                ("telegram:100", MODEL, "reply", 10, 1), ("telegram:100", MODEL, "reply", 10, 1),
                ("telegram:100", MODEL, "flush", 44, 7), ("telegram:100", MODEL, "reply", 12, 1)]
