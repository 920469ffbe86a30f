"""/memory, /memory rebuild, /forget, and the memory_index plugin's hook and search, through a whole bot."""

from __future__ import annotations

from memory.daily import DailyMemory
from plugins.builtin.memory_index import index_written, memory_written, wait_indexed
from tests.plugins.harness import PluginBot

SID = "telegram:100"
GROUP = "telegram:group:-5"


def _memory(bot: PluginBot) -> DailyMemory:
    cfg = bot.holder()
    return DailyMemory(cfg.data_path() / "memory", cfg.zone())


async def test_memory_shows_files_notes_chunks_and_model(tmp_path):
    async with PluginBot(tmp_path, memory_embedding_model="") as bot:
        assert await bot.say("/memory") == "\n".join([
            f"Memory of {SID}", "Daily files: none", "Notes (MEMORY.md): none", "Indexed passages: 0",
            "Embedding model: off (memory_embedding_model is empty; keyword search only)"])
        memory = _memory(bot)
        path = await memory.append(SID, "trim", "- Alice's budget is 2000 EUR.\n- Bob likes trains.")
        memory_written(SID, "summary", "- Alice's budget is 2000 EUR.\n- Bob likes trains.", path,
                             bot.services)
        memory_written(SID, "injected", "rolling summary", None, bot.services)  # not indexed
        await wait_indexed(bot.services)  # the hook indexes in the background
        (memory.session_dir(SID) / "MEMORY.md").write_text("- note\n")
        day = memory.today()
        assert await bot.say("/memory") == "\n".join([
            f"Memory of {SID}", f"Daily files: 1 ({day})", "Notes (MEMORY.md): 7 bytes", "Indexed passages: 2",
            "Embedding model: off (memory_embedding_model is empty; keyword search only)"])
        assert await bot.say("/memory nonsense") == (
            "Usage: /memory shows this conversation's memory; /memory rebuild re-indexes it (admins).")


async def test_rebuild_is_for_admins_and_uses_the_model_in_force(tmp_path):
    async with PluginBot(tmp_path, memory_embedding_model="") as bot:
        memory = _memory(bot)
        await memory.append("terminal:100", "trim", "- My cat is called Tom.")
        assert await bot.say("/memory rebuild") == "Sorry, /memory rebuild is for admins."
        assert await bot.admin("/memory rebuild") == (
            "Memory re-indexed: 1 passages with no embedding model (keyword search only) (replacing 0).")


async def test_memory_search_tool_uses_the_bot_index_by_meaning(tmp_path):
    async with PluginBot(tmp_path) as bot:  # memory_embedding_model defaults to "local"
        memory = _memory(bot)
        path = await memory.append(SID, "trim", "- My cat is called Tom.\n- The dentist is on Friday.")
        await index_written(SID, "summary", "- My cat is called Tom.\n- The dentist is on Friday.", path,
                             bot.services)
        assert bot.services.memory_search is not None
        tool = bot.tools.get("memory_search")
        from agent.tools.base import ToolContext

        # the app's tools get the services through their context (plugins bind them); no global lookup
        ctx = ToolContext(session_id=SID, config=bot.holder(), data_dir=bot.holder().data_path())
        out = await tool.call(ctx, {"query": "what is my pet named?"})
        assert out.splitlines()[0] == f"[{path.name}, {memory.today()}] My cat is called Tom."
        other = ToolContext(session_id="telegram:999", config=bot.holder(), data_dir=bot.holder().data_path())
        assert await tool.call(other, {"query": "cat"}) == "No memory matches for 'cat'."
        write = bot.tools.get("memory_write")
        assert (await write.call(ctx, {"text": "Alice is allergic to peanuts."})).startswith("Saved to MEMORY.md")
        await wait_indexed(bot.services)  # the note reaches the index through memory_written
        assert "Alice is allergic to peanuts." in await tool.call(ctx, {"query": "peanuts allergy"})
        assert "MEMORY.md" in await bot.say("/memory")


async def test_forget_asks_then_deletes_everything_of_the_session(tmp_path):
    async with PluginBot(tmp_path, memory_embedding_model="") as bot:
        await bot.say("hello there")
        await bot.say("hello again", chat_id="200", user_id="200")
        memory = _memory(bot)
        path = await memory.append(SID, "trim", "- a fact")
        await index_written(SID, "summary", "- a fact", path, bot.services)
        await bot.people.add("telegram:100", "I am vegetarian.")
        await bot.people.add("telegram:200", "I play the cello.")
        assert await bot.say("/forget") == (
            "This deletes this conversation's stored history, its memory files, its long-term notes, its search "
            "index and what I keep about you (/me), for good. Send /forget confirm to go ahead.")
        assert await bot.say("/forget please") == "Usage: /forget, then /forget confirm."
        assert len(await bot.store.sessions.load_messages(SID)) == 2
        assert await bot.say("/forget confirm") == (
            "Deleted for good: 2 stored messages, 1 daily memory file, no long-term notes, 1 search index entry, "
            "4 other records, your 1 person note (/me).")  # the inbox rows of the four messages
        assert await bot.store.sessions.load_messages(SID) == [] and not memory.session_dir(SID).exists()
        assert bot.people.notes("telegram:100") == [] and not bot.people.folder("telegram:100").exists()
        assert bot.people.notes("telegram:200") == ["I play the cello."]  # another person's stay
        assert len(await bot.store.sessions.load_messages("telegram:200")) == 2
        assert await bot.say("new start") == "echo: new start"
        assert [m.message["content"] for m in await bot.store.sessions.load_messages(SID)] == ["new start",
                                                                                               "echo: new start"]


async def test_forget_in_a_shared_group_is_for_admins(tmp_path):
    async with PluginBot(tmp_path, memory_embedding_model="", group_shared_session=True) as bot:
        kw = {"chat_id": "-5", "is_group": True, "group_name": "team"}
        assert await bot.say("/forget confirm", **kw) == "Sorry, only admins can forget a shared group conversation."
