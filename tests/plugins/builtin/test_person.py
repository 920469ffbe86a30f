"""Tests for plugins/builtin/person.py (/me), memory_write's person scope and where person notes reach the model."""

from __future__ import annotations

import pytest

from agent.tools.memory_tools import PERSON_SCOPE_REFUSED
from dispatcher.replies import PRIVATE_ONLY_REPLY
from plugins.builtin.person import ME_USAGE, NO_NOTES
from tests.fakes.fake_llm import FakeLLM
from tests.plugins.harness import PluginBot

ALICE = {"chat_id": "100", "user_id": "100", "user_name": "Alice"}
BOB = {"chat_id": "200", "user_id": "200", "user_name": "Bob"}
NOTE = "Alice is allergic to peanuts."
HEADER = "# What the person you are talking with asked you to remember about them (PERSON.md)"


def tool_result(llm: FakeLLM) -> str:
    """The last tool result the model received."""
    return [m["content"] for m in llm.history[-1].messages if m["role"] == "tool"][-1]


def system(llm: FakeLLM) -> str:
    return llm.history[-1].messages[0]["content"]


async def test_me_lists_deletes_and_adds_in_the_private_chat(tmp_path):
    llm = FakeLLM()
    async with PluginBot(tmp_path, llm=llm, memory_embedding_model="") as bot:
        assert await bot.say("/me", **ALICE) == NO_NOTES
        llm.enqueue_tools(("memory_write", {"text": NOTE, "scope": "person"})).enqueue("Noted.")
        assert await bot.say("remember that I am allergic to peanuts", **ALICE) == "Noted."
        assert tool_result(llm).startswith("Saved to PERSON.md (")
        assert (await bot.say("/me add I live in Lyon.", **ALICE)).startswith("Saved to PERSON.md (")
        assert await bot.say("/me add i live in LYON.", **ALICE) == "Already in PERSON.md; nothing written."
        listing = await bot.say("/me", **ALICE)
        assert listing.splitlines()[1:] == [f"1. {NOTE}", "2. I live in Lyon.",
                                            "Delete one with /me forget <n>, or all with /me forget all."]
        assert "never in a group conversation shared with others" in listing.splitlines()[0]
        assert await bot.say("/me", **BOB) == NO_NOTES  # Bob sees nothing of Alice's
        assert await bot.say("/me forget 3", **ALICE) == "There is no note 3: you have 2 notes. Send /me to see them."
        assert await bot.say("/me forget two", **ALICE) == ME_USAGE
        assert await bot.say("/me forget 1", **ALICE) == f"Deleted note 1: {NOTE}"
        assert bot.people.notes("telegram:100") == ["I live in Lyon."]
        assert await bot.say("/me forget all", **ALICE) == "Deleted your one note."
        assert await bot.say("/me forget all", **ALICE) == "There was nothing to delete: I keep no notes about you."
        group = {"is_group": True, "chat_id": "-5", "group_name": "Team", "user_id": "100", "user_name": "Alice"}
        assert await bot.say("/me", **group) == PRIVATE_ONLY_REPLY.format(command="me")


@pytest.mark.parametrize("shared", [True, False])
async def test_memory_write_for_a_person_is_refused_in_a_group_and_nothing_is_kept(tmp_path, shared):
    llm = FakeLLM()
    async with PluginBot(tmp_path, llm=llm, memory_embedding_model="", group_shared_session=shared) as bot:
        group = {"is_group": True, "chat_id": "-5", "group_name": "Team", "user_id": "100", "user_name": "Alice"}
        llm.enqueue_tools(("memory_write", {"text": NOTE, "scope": "person"})).enqueue("Sorry.")
        await bot.say("@bot remember I am allergic to peanuts", **group)
        assert tool_result(llm) == f"Error: ValueError: {PERSON_SCOPE_REFUSED}"
        llm.enqueue_tools(("memory_write", {"text": NOTE, "scope": "everyone"})).enqueue("Sorry.")
        await bot.say("@bot remember it anyway", **group)
        assert tool_result(llm).startswith("Error: ValueError: unknown scope 'everyone'")
        assert bot.people.notes("telegram:100") == []
        assert not (tmp_path / "data" / "memory" / "people").exists()


async def test_person_notes_reach_the_private_chat_and_per_member_group_sessions_only(tmp_path):
    llm = FakeLLM()
    async with PluginBot(tmp_path, llm=llm, memory_embedding_model="", group_shared_session=False) as bot:
        await bot.people.add("telegram:100", NOTE)
        await bot.say("hello", **ALICE)
        first = system(llm)
        assert f"{HEADER}\n- {NOTE}" in first
        await bot.say("hello again", **ALICE)
        assert system(llm) == first  # byte-stable between turns while nothing changed (the provider's cache)
        await bot.say("hello", **BOB)
        assert NOTE not in str(llm.history[-1].messages)  # another person's private chat
        member = {"is_group": True, "chat_id": "-5", "group_name": "Team"}
        await bot.say("@bot hi", **member, user_id="100", user_name="Alice")
        assert f"{HEADER}\n- {NOTE}" in system(llm)  # Alice's own session in the group (DESIGN §1.6)
        await bot.say("@bot hi", **member, user_id="200", user_name="Bob")
        assert NOTE not in str(llm.history[-1].messages)  # Bob's own session in the same group
        await bot.say("/me forget all", **ALICE)
        await bot.say("hello once more", **ALICE)
        assert HEADER not in system(llm)


async def test_person_notes_never_reach_a_shared_group_session(tmp_path):
    llm = FakeLLM()
    async with PluginBot(tmp_path, llm=llm, memory_embedding_model="", group_shared_session=True) as bot:
        await bot.people.add("telegram:100", NOTE)
        group = {"is_group": True, "chat_id": "-5", "group_name": "Team"}
        await bot.say("@bot hi", **group, user_id="100", user_name="Alice")
        await bot.say("@bot what do you know about me?", **group, user_id="100", user_name="Alice")
        assert len(llm.history) == 2
        assert all(NOTE not in str(r.messages) and HEADER not in str(r.messages) for r in llm.history)
