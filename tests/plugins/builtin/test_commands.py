"""Tests for plugins/builtin/commands.py: /help, /context (clear, summary), /reset, /clear and /compact."""

from __future__ import annotations

import json

import pytest

from agent.context import injection_text
from plugins.builtin.commands import NO_SUMMARY_REPLY, SHARED_GROUP_REPLY, bar
from summaries.summarizer import Checked
from tests.fakes.fake_llm import FakeLLM
from tests.plugins.harness import FakeSummarizer, PluginBot

SID = "telegram:100"


async def chat(bot: PluginBot, *texts: str, **kw) -> None:
    for text in texts:
        await bot.say(text, **kw)


async def test_help_lists_every_command_and_marks_admin_ones(tmp_path):
    async with PluginBot(tmp_path) as bot:
        assert await bot.say("/help") == "\n".join([
            "Commands:",
            "/help — list the commands",
            "/context — this conversation's statistics; /context clear empties the context; "
            "/context summary shows the summary in it",
            "/reset — the same as /context clear",
            "/clear — the same as /context clear",
            "/compact — summarise all but the last exchange now, to free up context",
            "/config — show settings; /config <key> <value> changes one (admins)",
            "/auth — /auth <password> makes you an admin (private chat)",
            "/console — a new one-time link to the web console (admins, private chat)",
            "/memory — this conversation's memory; /memory rebuild re-indexes it (admins)",
            "/forget — delete this conversation's history and memory for good (asks first)",
            "/me — what I keep about you across your chats; /me forget <n> or /me forget all deletes (private chat)",
            "/export — everything stored for this conversation (and your notes) as one file",
            "/usage — tokens used today and this month by this chat and by you, against the caps",
            "/remind — /remind <when> <text>: a reminder in this chat (in 20m, at 18:30, tomorrow 9:00, "
            "2026-12-24 08:00, every day 9:00, 明天早上9点)",
            "/reminders — this chat's pending reminders; /reminders cancel <n> cancels one",
            "/tools — the tools this chat's model may use, and each MCP server's state",
            "/kb — this chat's documents; /kb add [scope], /kb remove <name>, /kb use|unuse <scope> (admins)",
        ])
        assert bot.llm.history == []  # commands never reach the model


def test_bar():
    assert bar(0) == "[░░░░░░░░░░]"
    assert bar(0.41) == "[████░░░░░░]"
    assert bar(1) == "[██████████]"
    assert bar(3.5) == "[██████████]"


async def test_context_shows_turns_roles_tokens_and_summary(tmp_path):
    llm = FakeLLM().enqueue_tools(("current_time", {})).enqueue("It is noon.")
    async with PluginBot(tmp_path, llm=llm) as bot:
        await chat(bot, "what time is it?", "thanks")
        state = bot.sessions.peek(SID)
        counter = bot.agent.counter("gpt-4o-mini")
        history = sum(counter.count_message(m.message) for m in state.messages)
        system = bot.agent.system_prompt(state)
        budget = bot.agent.budget(state, system).max_tokens
        reserved = counter.count_text(system)
        schemas = bot.agent.tools.schemas()
        tools = counter.count_text(json.dumps(schemas))
        assert tools > 0  # the tools' schemas count as used (issue 40): on a small window they are half of it
        used, limit = history + reserved + tools, budget + reserved + tools
        fraction = used / limit
        assert await bot.say("/context") == "\n".join([
            f"Context of {SID}",
            "Turns: 2 of 20",
            "Messages: 6 (user 2, assistant 3, tool 1)",
            f"Tokens: {bar(fraction)} {fraction:.0%} of {limit:,} ({used:,} used, {history:,} of them by the turns)",
            f"System prompt: ~{counter.count_text(system):,} tokens",
            f"Tools' schemas: ~{tools:,} tokens ({len(schemas)} tools)",
            "Model window: 128,000 tokens (from the table of known models)",
            "Summary: none",
        ])
        assert await bot.say("/context what") == ("Usage: /context shows this conversation's statistics; "
                                                  "/context clear empties its context; /context summary shows the "
                                                  "summary now in its context.")


async def test_context_shows_the_last_summary_check(tmp_path):
    summarizer = FakeSummarizer()
    async with PluginBot(tmp_path, summarizer=summarizer) as bot:
        await chat(bot, "hello")
        summarizer.checks[SID] = Checked(job_id=3, reason="trim", found=3, total=4, kept=1, fallback=False)
        assert (await bot.say("/context")).splitlines()[-1] == (
            "Last summary check: the model's summary kept 3 of 4 facts (75%); "
            "1 line of the user's own words kept verbatim.")
        summarizer.checks[SID] = Checked(job_id=4, reason="trim", found=2, total=2, kept=0, fallback=True)
        assert (await bot.say("/context")).splitlines()[-1] == (
            "Last summary check: the fallback kept 2 of 2 facts (100%).")
        summarizer.checks[SID] = Checked(job_id=5, reason="trim", found=0, total=0, kept=0, fallback=False)
        assert (await bot.say("/context")).splitlines()[-1] == "Last summary check: no concrete facts to keep."
        del summarizer.checks[SID]
        assert (await bot.say("/context")).splitlines()[-1] == "Summary: none"


async def test_context_summary_shows_the_summary_in_context_or_says_there_is_none(tmp_path):
    async with PluginBot(tmp_path, summarizer=FakeSummarizer()) as bot:
        assert await bot.say("/context summary") == NO_SUMMARY_REPLY
        await chat(bot, "one", "two")
        state = bot.sessions.peek(SID)
        await bot.sessions.live.inject(SID, "- Alice lives in Lisbon\n- (kept) My cat is called Tom.", 1, 0,
                                       lambda: False)
        assert await bot.say("/context summary") == (
            "Summary in context (1 earlier turn):\n\n- Alice lives in Lisbon\n- (kept) My cat is called Tom.")
        await bot.sessions.live.inject(SID, state.summary, 3, 0, lambda: False)
        assert (await bot.say("/context  Summary ")).startswith("Summary in context (3 earlier turns):")
        assert len(bot.llm.history) == 2  # commands never reach the model


@pytest.mark.parametrize("command", ["/reset", "/clear"])
async def test_reset_and_clear_are_aliases_of_context_clear(tmp_path, command):
    summarizer = FakeSummarizer()
    async with PluginBot(tmp_path, summarizer=summarizer) as bot:
        await chat(bot, "my name is Alice", "I like tea")
        assert await bot.say(command) == "Context cleared. 2 turns were saved to memory."
        assert summarizer.submitted == [(SID, "clear", 1, 4)]
        assert bot.sessions.peek(SID).messages == []
        assert (await bot.store.sessions.get(SID)).context_start_seq == 5
        assert await bot.say(command) == "Context cleared. There was nothing new to save to memory."


async def test_context_clear_saves_unsummarised_turns_and_survives_a_restart(tmp_path):
    summarizer = FakeSummarizer()
    async with PluginBot(tmp_path, summarizer=summarizer) as bot:
        await chat(bot, "my name is Alice", "I like tea")
        assert await bot.say("/context clear") == "Context cleared. 2 turns were saved to memory."
        assert summarizer.submitted == [(SID, "clear", 1, 4)]
        record = await bot.store.sessions.get(SID)
        assert record.context_start_seq == 5 and record.summary is None
        assert bot.sessions.peek(SID).messages == []
        assert await bot.say("who am I?") == "echo: who am I?"
        assert bot.llm.history[-1].user_texts() == ["who am I?"]
        assert await bot.say("/context clear") == "Context cleared. 1 turn was saved to memory."
        assert summarizer.submitted[-1] == (SID, "clear", 5, 6)
        assert await bot.say("/context clear") == "Context cleared. There was nothing new to save to memory."
    # a restart (new store and session manager over the same database) does not bring the history back
    llm = FakeLLM()
    async with PluginBot(tmp_path, llm=llm, summarizer=FakeSummarizer()) as bot:
        assert await bot.say("hello again") == "echo: hello again"
        assert llm.history[0].user_texts() == ["hello again"]
        assert len(await bot.store.sessions.load_messages(SID)) == 8  # nothing was deleted


async def test_context_clear_skips_what_was_already_summarised(tmp_path):
    summarizer = FakeSummarizer()
    async with PluginBot(tmp_path, summarizer=summarizer) as bot:
        await chat(bot, "one", "two", "three")
        await bot.sessions.live.inject(SID, "- one and two", 2, 4, lambda: False)
        assert await bot.say("/context clear") == "Context cleared. 1 turn was saved to memory."
        assert summarizer.submitted == [(SID, "clear", 5, 6)]
        assert (await bot.store.sessions.get(SID)).summary is None


async def test_clear_and_compact_in_a_shared_group_are_for_admins(tmp_path):
    summarizer = FakeSummarizer()
    group = {"is_group": True, "chat_id": "-5", "group_name": "Team"}
    async with PluginBot(tmp_path, summarizer=summarizer, group_shared_session=True,
                         admin_users=["telegram:7"]) as bot:
        await chat(bot, "@bot hello", "@bot plans?", **group)
        sid = "telegram:group:-5"
        before = list(bot.sessions.peek(sid).messages)
        assert await bot.say("/context clear", **group) == SHARED_GROUP_REPLY.format(what="clear")
        assert await bot.say("/compact", **group) == SHARED_GROUP_REPLY.format(what="compact")
        assert bot.sessions.peek(sid).messages == before
        assert summarizer.submitted == [] and summarizer.now == []
        assert (await bot.store.sessions.get(sid)).context_start_seq == 1
        # everyone may still look
        assert (await bot.say("/context", **group)).splitlines()[1] == "Turns: 2 of 20"
        assert await bot.say("/context clear", user_id="7", **group) == \
            "Context cleared. 2 turns were saved to memory."


async def test_clear_in_a_per_member_group_session_is_for_everyone(tmp_path):
    summarizer = FakeSummarizer()
    group = {"is_group": True, "chat_id": "-5", "group_name": "Team"}
    async with PluginBot(tmp_path, summarizer=summarizer) as bot:
        await chat(bot, "@bot hello", **group)
        assert await bot.say("/context clear", **group) == "Context cleared. 1 turn was saved to memory."
        assert summarizer.submitted == [("telegram:group:-5:100", "clear", 1, 2)]


async def test_compact_keeps_the_last_turn_and_injects_the_summary(tmp_path):
    summarizer = FakeSummarizer("- Alice likes tea.\n- She lives in Oslo.")
    async with PluginBot(tmp_path, summarizer=summarizer) as bot:
        await chat(bot, "I like tea", "I live in Oslo", "what's the weather?")
        assert await bot.say("/compact") == ("Compacted 2 turns. Summary:\n\n"
                                             "- Alice likes tea.\n- She lives in Oslo.")
        assert summarizer.now == [(SID, "compact", 1, 4)]
        record = await bot.store.sessions.get(SID)
        assert record.context_start_seq == 5
        await bot.say("and tomorrow?")
        sent = bot.llm.history[-1].messages
        assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
        assert sent[1]["content"] == injection_text("- Alice likes tea.\n- She lives in Oslo.", 2,
                                                    "what's the weather?")
        assert sent[3]["content"] == "and tomorrow?"
    # the injection is persisted: after a restart it is still there
    llm = FakeLLM()
    async with PluginBot(tmp_path, llm=llm, summarizer=FakeSummarizer()) as bot:
        await bot.say("still there?")
        assert llm.history[0].messages[1]["content"].startswith(
            "[System: Previous conversation summary — 2 turns were compacted]\n\n- Alice likes tea.")


async def test_compact_with_one_turn_has_nothing_to_do(tmp_path):
    summarizer = FakeSummarizer()
    async with PluginBot(tmp_path, summarizer=summarizer) as bot:
        assert await bot.say("/compact") == "Nothing to compact: the context holds at most one exchange."
        await bot.say("hi")
        assert await bot.say("/compact") == "Nothing to compact: the context holds at most one exchange."
        assert summarizer.now == []


async def test_compact_when_nothing_is_worth_summarising(tmp_path):
    summarizer = FakeSummarizer(text=None)
    async with PluginBot(tmp_path, summarizer=summarizer) as bot:
        await chat(bot, "hi", "ok")
        assert await bot.say("/compact") == "Compacted 1 turn. There was nothing worth summarising."
        assert [m.seq for m in bot.sessions.peek(SID).messages] == [3, 4]


async def test_compact_falls_back_to_a_background_job_when_summarising_fails(tmp_path):
    class Failing(FakeSummarizer):
        async def summarize_now(self, *args):
            raise RuntimeError("model down")

    summarizer = Failing()
    async with PluginBot(tmp_path, summarizer=summarizer) as bot:
        await chat(bot, "hi", "ok")
        assert await bot.say("/compact") == ("Compacted 1 turn. The summary could not be made just now; "
                                             "it will be written in the background.")
        assert summarizer.submitted == [(SID, "compact", 1, 2)]
