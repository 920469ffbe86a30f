"""The channel registry: built-in and installed channels, ``channel_type`` checked against it."""

from __future__ import annotations

import asyncio
import sys
from types import SimpleNamespace

import pytest

from bootstrap.compose import build_channels
from channels import registry
from channels.registry import (
    BUILTIN_CHANNELS,
    check_channel_names,
    check_channel_type,
    create_channel,
    known_channels,
)
from config.settings import Config, validate_data
from core.errors import ConfigError
from tests.fakes.distribution import doc_example, write_distribution
from tests.plugins.harness import PluginBot

IRC_MODULE = '''
from channels.base import BaseChannel
from channels.registry import register_channel


@register_channel("irc")
class IRCChannel(BaseChannel):
    """A channel that only records what it is given."""

    name = "irc"

    def __init__(self, config, services=None):
        super().__init__()
        self.config, self.services = config, services

    async def start(self, intake=True):
        pass

    async def stop(self):
        pass

    async def send(self, to, text):
        pass
'''


@pytest.fixture
def irc_installed(tmp_path, monkeypatch):
    """A third-party channel, installed as a real distribution with a ``longchat.channels`` entry point."""
    write_distribution(tmp_path, "longchat-irc", files={"longchat_irc.py": IRC_MODULE},
                       entry_points={"longchat.channels": {"irc": "longchat_irc"}})
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    registry.unregister("irc")
    sys.modules.pop("longchat_irc", None)


def test_builtin_channels_register_themselves_under_their_listed_names():
    for name, module in BUILTIN_CHANNELS.items():
        factory = registry.channel_factory(name)
        assert factory.__module__ == module and factory.name == name
    assert known_channels() == ["dingtalk", "feishu", "telegram", "terminal", "web", "wechat", "wecom", "weixin"]


def test_channel_type_names_the_known_channels_and_the_nearest():
    # the registry checks channel_type (at start, before /config and the console write, in the watcher): the
    # config model below it takes any name
    assert validate_data({"channel_type": "telegarm"}).channels == ["telegarm"]
    with pytest.raises(ConfigError) as err:
        check_channel_type(Config(channel_type=["terminal", "telegarm"]))
    assert str(err.value) == ("invalid value for 'channel_type': unknown channel 'telegarm': the known "
                              "channels are dingtalk, feishu, telegram, terminal, web, wechat, wecom, weixin; did "
                              "you mean 'telegram'?")
    check_channel_type(Config(channel_type=["terminal", "telegram"]))
    with pytest.raises(ValueError, match=r"^unknown channel 'irc': the known channels are dingtalk, feishu, "
                                         r"telegram, terminal, web, wechat, wecom, weixin$"):
        check_channel_names(["terminal", "irc"])


async def test_config_refuses_an_unknown_channel_and_writes_nothing(tmp_path):
    async with PluginBot(tmp_path, admin_users=["telegram:7"]) as bot:
        before = bot.file_bytes()
        reply = await bot.admin("/config channel_type telegarm")
        assert reply.startswith("Nothing changed: invalid value for 'channel_type': unknown channel 'telegarm': ")
        assert "did you mean 'telegram'?" in reply
        assert bot.file_bytes() == before and bot.holder().channel_type == "terminal"
        assert await bot.admin('/config channel_type ["terminal", "telegram"]') == (
            'Saved channel_type = ["terminal", "telegram"]; it takes effect after a restart.')


def test_build_channels_uses_the_registry():
    cfg = Config(channel_type=["terminal", "telegram"], telegram_bot_token="1:x")
    windows = SimpleNamespace(get=lambda model: SimpleNamespace(describe=lambda: f"128,000 tokens ({model})"))
    services = SimpleNamespace(commands=object(), agent=SimpleNamespace(windows=windows), store=None)
    terminal, telegram = build_channels(cfg, services)
    assert (terminal.name, telegram.name) == ("terminal", "telegram")
    assert telegram.config is cfg and telegram.commands is services.commands  # the parts each takes, not all
    assert terminal.window(cfg.model) == f"128,000 tokens ({cfg.model})"
    assert terminal.keep_in_history("/auth hunter22") is False and terminal.keep_in_history("hello") is True


def test_an_installed_channel_is_known_without_import_and_built_on_demand(irc_installed):
    assert "longchat_irc" not in sys.modules
    assert known_channels() == ["dingtalk", "feishu", "irc", "telegram", "terminal", "web", "wechat", "wecom",
                              "weixin"]
    cfg = Config(channel_type=["terminal", "irc"])
    assert "longchat_irc" not in sys.modules  # checking the name imported nothing
    services = object()
    channel = create_channel("irc", config=cfg, services=services)
    assert type(channel).__module__ == "longchat_irc"
    assert (channel.name, channel.config, channel.services) == ("irc", cfg, services)


def test_an_entry_point_may_name_the_factory_itself(tmp_path, monkeypatch):
    module = IRC_MODULE.replace('@register_channel("irc")\n', "").replace('"irc"', '"matrix"')
    write_distribution(tmp_path, "longchat-matrix", files={"longchat_matrix.py": module},
                       entry_points={"longchat.channels": {"matrix": "longchat_matrix:IRCChannel"}})
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        channel = create_channel("matrix", config=Config(), services=None)
        assert channel.name == "matrix" and registry.channel_factory("matrix") is type(channel)
    finally:
        registry.unregister("matrix")
        sys.modules.pop("longchat_matrix", None)


def test_register_checks_names():
    with pytest.raises(ValueError, match="lower case"):
        registry.register("My Channel", object)


async def test_the_docs_channel_example_runs_as_an_installed_channel(tmp_path, monkeypatch):
    module, source, eps = doc_example("extending.md", "Writing a channel")
    write_distribution(tmp_path / "site", "longchat-memo", files={f"{module}.py": source}, entry_points=eps)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    try:
        (tmp_path / "config.json").write_text('{"channel_type": "memo", "data_dir": "data"}', encoding="utf-8")
        async with PluginBot(tmp_path) as bot:
            [memo] = build_channels(bot.holder.current, bot.services)
            assert type(memo).__name__ == "MemoChannel"
            bot.dispatcher.add_channel(memo)
            await memo.start()
            try:
                await memo.inbox.put(("7", "hello"))
                async with asyncio.timeout(5):
                    while not memo.replies:  # noqa: ASYNC110 - the docs example keeps a plain list
                        await asyncio.sleep(0.01)
                await bot.dispatcher.wait_idle()
            finally:
                await memo.stop()
        assert memo.replies == [("7", "echo: hello")]
    finally:
        registry.unregister("memo")
        sys.modules.pop(module, None)


MATRIX_MODULE = '''
from pydantic import BaseModel, ConfigDict

from channels.base import BaseChannel
from channels.registry import register_channel


@register_channel("matrix")
class MatrixChannel(BaseChannel):
    """A third-party channel with settings of its own and a preflight."""

    name = "matrix"

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        homeserver: str = ""
        room_limit: int = 10

    @classmethod
    def preflight(cls, cfg):
        return None if cfg.plugins.get("matrix", {}).get("homeserver") else "plugins.matrix.homeserver is empty"

    def __init__(self, config, settings):
        super().__init__()
        self.config, self.settings = config, settings

    async def start(self, intake=True):
        pass

    async def stop(self):
        pass

    async def send(self, to, text):
        pass
'''


@pytest.fixture
def matrix_installed(tmp_path, monkeypatch):
    write_distribution(tmp_path, "longchat-matrix", files={"longchat_matrix.py": MATRIX_MODULE},
                       entry_points={"longchat.channels": {"matrix": "longchat_matrix"}})
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    registry.unregister("matrix")
    sys.modules.pop("longchat_matrix", None)


def test_a_third_party_channel_gets_its_settings_from_plugins_and_runs_its_preflight(matrix_installed):
    cfg = Config(channel_type="matrix", plugins={"matrix": {"homeserver": "https://m.example", "room_limit": 3}})
    assert registry.channel_problem("matrix", cfg) is None
    channel = create_channel("matrix", config=cfg, services=None)
    assert (channel.settings.homeserver, channel.settings.room_limit) == ("https://m.example", 3)
    assert registry.channel_problem("matrix", Config(channel_type="matrix")) == "plugins.matrix.homeserver is empty"
    wrong = Config(channel_type="matrix", plugins={"matrix": {"homeserver": "h", "room_limt": 3}})
    assert registry.channel_problem("matrix", wrong) == (
        "unknown setting 'plugins.matrix.room_limt'; did you mean plugins.matrix.room_limit?")


async def test_a_channels_settings_are_checked_like_a_plugins_before_config_writes_them(tmp_path, matrix_installed):
    async with PluginBot(tmp_path) as bot:
        assert bot.manager.check_settings({"matrix": {"homeserver": "h"}}) is None
        assert bot.manager.check_settings({"matrix": {"room_limit": "many"}}) == (
            "invalid value for 'plugins.matrix.room_limit': Input should be a valid integer, "
            "unable to parse string as an integer")


def test_builtin_channels_say_why_they_cannot_run_before_anything_connects():
    assert registry.channel_problem("terminal", Config()) is None
    assert registry.channel_problem("telegram", Config(channel_type="telegram")).startswith(
        "telegram_bot_token is empty")
    webhook = Config(channel_type="telegram", telegram_bot_token="1:x", telegram_mode="webhook")
    assert registry.channel_problem("telegram", webhook) == "telegram_mode is webhook but telegram_webhook_url is empty"
