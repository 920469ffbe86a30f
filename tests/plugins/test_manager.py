"""Tests for plugins/manager.py: discovery, settings, on/off, isolation, reloads, message hooks."""

from __future__ import annotations

import logging
import sys
from collections import Counter

from pydantic import BaseModel, ConfigDict

from agent.tools.base import ToolContext
from dispatcher.replies import UNKNOWN_COMMAND_REPLY
from plugins.hookspecs import SKIP, hookimpl
from plugins.manager import COMMAND_FAILED_REPLY
from tests.fakes.distribution import doc_example, write_distribution
from tests.plugins.harness import PluginBot


class Shout:
    """A test plugin with settings, a command, a tool and both message hooks."""

    name = "shout"

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)

        enabled: bool = True
        suffix: str = "!"

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    @hookimpl
    def register_commands(self, register, settings):
        async def shout(request):
            self.calls["command"] += 1
            return request.command.args.upper() + settings.suffix
        register("shout", shout, "say it louder")

    @hookimpl
    def register_tools(self, register):
        def loudness(ctx, level: int) -> str:
            """How loud to be."""
            return str(level)
        register(loudness)

    @hookimpl
    async def before_agent(self, text):
        self.calls["before"] += 1
        if text == "stop":
            return SKIP
        if text.startswith("rewrite "):
            return text[len("rewrite "):]
        return None

    @hookimpl
    def after_reply(self, message, reply, settings):
        self.calls["after"] += 1
        if message.text.startswith("/"):
            return None  # command replies (they pass through this hook too) stay as they are
        return reply.upper() + settings.suffix


class Broken:
    """A test plugin whose every hook raises."""

    name = "broken"

    @hookimpl
    def register_commands(self, register):
        async def boom(request):
            raise RuntimeError("command exploded")
        register("boom", boom, "always fails")

    @hookimpl
    def before_agent(self, text):
        raise RuntimeError("before exploded")

    @hookimpl
    def after_reply(self, reply):
        raise RuntimeError("after exploded")


async def test_builtins_register_their_commands_and_tools(tmp_path):
    async with PluginBot(tmp_path) as bot:
        assert [c.name for c in bot.commands.all()] == ["help", "context", "reset", "clear", "compact", "config",
                                                        "auth", "console", "memory", "forget", "me", "export", "usage",
                                                        "remind", "reminders", "tools", "kb"]
        assert bot.tools.names() == ["current_time", "memory_search", "memory_get", "memory_write", "web_fetch",
                                     "history_search", "schedule_message", "list_reminders", "cancel_reminder",
                                     "knowledge_search"]
        assert {n: i.enabled for n, i in bot.manager.plugins.items()} == {"commands": True, "admin": True,
                                                                           "tools": True, "memory_index": True,
                                                                           "memory_commands": True, "person": True,
                                                                           "export": True, "usage": True,
                                                                           "reminders": True, "mcp_tools": True,
                                                                           "knowledge": True}
        assert bot.manager.plugins["admin"].commands == ["config", "auth", "console"]


async def test_a_plugin_command_tool_and_hooks_work(tmp_path):
    shout = Shout()
    async with PluginBot(tmp_path, extra=[shout], plugins={"shout": {"suffix": "?!"}}) as bot:
        assert await bot.say("/shout hey") == "HEY?!"
        assert "loudness" in bot.tools.names()
        assert await bot.say("rewrite hello") == "ECHO: HELLO?!"
        assert bot.llm.history[-1].user_texts() == ["hello"]
        assert "loudness" in [t["function"]["name"] for t in bot.llm.history[-1].tools]


async def test_skip_stops_the_agent_and_sends_nothing(tmp_path):
    shout = Shout()
    async with PluginBot(tmp_path, extra=[shout]) as bot:
        await bot.dispatcher.handle(bot.channel.message("stop"))
        await bot.dispatcher.wait_idle()
        assert bot.channel.texts() == []
        assert bot.llm.history == []
        assert shout.calls["after"] == 0


async def test_a_failing_plugin_never_breaks_the_chat(tmp_path, caplog):
    shout = Shout()
    async with PluginBot(tmp_path, extra=[Broken(), shout]) as bot:
        with caplog.at_level(logging.ERROR, logger="plugins.manager"):
            assert await bot.say("hi") == "ECHO: HI!"
            assert await bot.say("/boom") == COMMAND_FAILED_REPLY.format(command="boom")
    # the plugins after the broken one still ran, and every failure was logged with its traceback
    assert shout.calls["before"] == 1 and shout.calls["after"] == 2
    failures = [r for r in caplog.records if r.exc_info]
    assert [r.getMessage() for r in failures] == ["plugin broken: before_agent failed; skipped",
                                                  "plugin broken: after_reply failed; skipped",
                                                  "plugin broken: /boom failed",
                                                  "plugin broken: after_reply failed; skipped"]
    assert str(failures[2].exc_info[1]) == "command exploded"


async def test_a_plugin_that_fails_to_register_is_skipped(tmp_path, caplog):
    class BadRegister:
        name = "badreg"

        @hookimpl
        def register_commands(self, register):
            register("half", _noop, "registered before the failure")
            raise ValueError("nope")

    with caplog.at_level(logging.ERROR, logger="plugins.manager"):
        async with PluginBot(tmp_path, extra=[BadRegister()]) as bot:
            assert await bot.say("/help") != ""
            assert "plugin badreg: register_commands failed; skipped" in caplog.text


async def _noop(request):
    return "ok"


async def test_enabled_false_turns_a_plugin_off_and_on_live(tmp_path):
    shout = Shout()
    async with PluginBot(tmp_path, extra=[shout], plugins={"shout": {"enabled": False}}) as bot:
        assert await bot.say("/shout hey") == UNKNOWN_COMMAND_REPLY.format(command="shout")
        assert await bot.say("hi") == "echo: hi"
        assert "loudness" not in bot.tools.names()
        # turned on through /config: the change reloads the plugins at once
        assert await bot.admin("/config plugins.shout.enabled true") == "Set plugins.shout.enabled = true."
        assert await bot.say("/shout hey") == "HEY!"
        assert "loudness" in bot.tools.names()
        assert await bot.say("hi") == "ECHO: HI!"  # its message hooks run from now on
        assert await bot.admin("/config plugins.shout.enabled false") == "Set plugins.shout.enabled = false."
        assert await bot.say("/shout hey") == UNKNOWN_COMMAND_REPLY.format(command="shout")
        assert "loudness" not in bot.tools.names()
        assert await bot.say("hi") == "echo: hi"  # and no longer


async def test_a_builtin_can_be_turned_off(tmp_path):
    async with PluginBot(tmp_path, plugins={"tools": {"enabled": False}}) as bot:
        # the reminders' and the knowledge base's
        assert bot.tools.names() == ["schedule_message", "list_reminders", "cancel_reminder", "knowledge_search"]
    async with PluginBot(tmp_path, plugins={"tools": {"enabled": False}, "reminders": {"enabled": False},
                                            "knowledge": {"enabled": False}}) as bot:
        assert bot.tools.names() == []
        assert bot.tools.schemas() == []
        assert "remind" not in [c.name for c in bot.commands.all()]


async def test_invalid_plugin_settings_disable_only_that_plugin(tmp_path, caplog):
    with caplog.at_level(logging.ERROR, logger="plugins.manager"):
        async with PluginBot(tmp_path, extra=[Shout()], plugins={"shout": {"suffix": 3}}) as bot:
            assert await bot.say("/shout hey") == UNKNOWN_COMMAND_REPLY.format(command="shout")
            assert await bot.say("hi") == "echo: hi"
    lines = [r.getMessage() for r in caplog.records if r.name == "plugins.manager"]
    assert lines == ["plugin shout disabled: invalid value for 'plugins.shout.suffix': Input should be a valid string"]


async def test_an_unknown_plugin_setting_is_named_with_a_suggestion(tmp_path, caplog):
    with caplog.at_level(logging.ERROR, logger="plugins.manager"):
        async with PluginBot(tmp_path, extra=[Shout()], plugins={"shout": {"sufix": "?"}}) as bot:
            assert bot.manager.plugins["shout"].enabled is False
    assert ("plugin shout disabled: unknown setting 'plugins.shout.sufix'; did you mean plugins.shout.suffix?"
            in caplog.text)


async def test_plugin_without_settings_accepts_only_enabled(tmp_path, caplog):
    with caplog.at_level(logging.ERROR, logger="plugins.manager"):
        async with PluginBot(tmp_path, plugins={"commands": {"colour": "red"}}) as bot:
            assert bot.manager.plugins["commands"].enabled is False
            assert bot.commands.get("help") is None
            assert bot.commands.get("config") is not None
    assert "plugin commands disabled: unknown setting 'plugins.commands.colour'" in caplog.text


async def test_reloading_never_registers_twice(tmp_path):
    shout = Shout()
    async with PluginBot(tmp_path, extra=[shout]) as bot:
        names = [c.name for c in bot.commands.all()]
        tools = bot.tools.names()
        for _ in range(3):
            bot.manager.reload()
        assert [c.name for c in bot.commands.all()] == names
        assert bot.tools.names() == tools
        assert await bot.say("/shout x") == "X!"
        assert await bot.say("hi") == "ECHO: HI!"
        assert shout.calls == Counter({"command": 1, "before": 1, "after": 2})  # command replies pass it too
        # one of the plugin's own, beside the memory index's (which wakes the turn indexer)
        assert [i.plugin_name for i in bot.manager._pm.hook.after_reply.get_hookimpls()] == ["memory_index", "shout"]


async def test_plugins_are_discovered_in_a_folder(tmp_path, caplog):
    folder = tmp_path / "plugins"
    (folder / "pkgplug").mkdir(parents=True)
    (folder / "greet.py").write_text(
        "from plugins.hookspecs import hookimpl\n\n"
        "async def hello(request):\n    return 'hello ' + request.message.user_name\n\n"
        "@hookimpl\ndef register_commands(register):\n    register('hello', hello, 'greet')\n", encoding="utf-8")
    (folder / "pkgplug" / "__init__.py").write_text(
        "from plugins.hookspecs import hookimpl\nfrom .texts import WORD\n\n"
        "@hookimpl\ndef after_reply(reply):\n    return reply + WORD\n", encoding="utf-8")
    (folder / "pkgplug" / "texts.py").write_text("WORD = ' (pkg)'\n", encoding="utf-8")
    (folder / "_private.py").write_text("raise RuntimeError('never imported')\n", encoding="utf-8")
    (folder / "broken.py").write_text("raise RuntimeError('import failed')\n", encoding="utf-8")
    with caplog.at_level(logging.ERROR, logger="plugins.manager"):
        async with PluginBot(tmp_path, directory=folder) as bot:
            assert await bot.say("/hello") == "hello Alice (pkg)"
            assert sorted(bot.manager.plugins) == ["admin", "commands", "export", "greet", "knowledge", "mcp_tools",
                                                   "memory_commands", "memory_index", "person", "pkgplug",
                                                   "reminders", "tools", "usage"]
    assert [r.getMessage() for r in caplog.records] == ["plugin broken failed to import; skipped"]


async def test_unknown_plugin_name_in_config_is_warned_about(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="plugins.manager"):
        async with PluginBot(tmp_path, plugins={"comands": {"enabled": True}}):
            pass
    assert "config.plugins names an unknown plugin 'comands'; did you mean commands?" in caplog.text


async def test_the_docs_plugin_example_runs_as_an_installed_package(tmp_path, monkeypatch):
    module, source, eps = doc_example("extending.md", "Writing a plugin")
    write_distribution(tmp_path / "site", "longchat-wordcount", files={f"{module}.py": source}, entry_points=eps)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    try:
        async with PluginBot(tmp_path) as bot:
            assert bot.manager.plugins["wordcount"].enabled and not bot.manager.plugins["wordcount"].builtin
            assert bot.manager.plugins["wordcount"].commands == ["words"]
            assert await bot.say("/words one two three") == "3 words"
            assert await bot.say("hello") == "echo: hello"
            # the tool takes the store from its context, as the agent calls it
            tool = bot.tools.get("stored_messages")
            ctx = ToolContext(session_id="telegram:100", config=bot.holder.current)
            assert await tool.call(ctx, {}) == "2"  # "hello" and its answer
    finally:
        sys.modules.pop(module, None)


async def test_a_broken_installed_plugin_is_skipped_and_the_others_load(tmp_path, monkeypatch, caplog):
    module, source, eps = doc_example("extending.md", "Writing a plugin")
    files = {f"{module}.py": source, "longchat_broken.py": "raise ImportError('missing dependency')\n"}
    entries = {"longchat": {"aaa_broken": "longchat_broken", **eps["longchat"]}}
    write_distribution(tmp_path / "site", "longchat-two", files=files, entry_points=entries)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    try:
        with caplog.at_level(logging.ERROR, logger="plugins.manager"):
            async with PluginBot(tmp_path) as bot:
                assert await bot.say("/words a b") == "2 words"
                assert "aaa_broken" not in bot.manager.plugins
        [record] = [r for r in caplog.records if r.name == "plugins.manager"]
        assert record.getMessage() == "plugin entry point aaa_broken (longchat_broken) failed to import; skipped"
    finally:
        sys.modules.pop(module, None)
        sys.modules.pop("longchat_broken", None)
