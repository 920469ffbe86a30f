"""Live config: the config.json watcher (config/watch.py) and saving one setting (config/settings.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path

import pytest

import config.settings as config_module
from channels.registry import check_channel_type
from config.edit import parse_value, save_setting, with_setting
from config.settings import ConfigHolder, live_config, load_config
from config.watch import ConfigWatcher
from core.errors import ConfigError

NO_ENV: dict[str, str] = {}


def write(path: Path, data: dict | str) -> None:
    """Replace the file the way editors do: a temporary file, then a rename."""
    tmp = path.with_name(path.name + ".swp~")
    tmp.write_text(data if isinstance(data, str) else json.dumps(data, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def make(tmp_path: Path, **settings) -> tuple[Path, ConfigHolder]:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"data_dir": "data", **settings}, indent=2), encoding="utf-8")
    return path, ConfigHolder(load_config(path, NO_ENV), path)


async def wait_until(predicate, within: float = 2.0) -> float:
    started = time.perf_counter()
    while not predicate():
        assert time.perf_counter() - started < within, "not within the time limit"
        await asyncio.sleep(0.02)
    return time.perf_counter() - started


@pytest.fixture
async def watched(tmp_path):
    path, holder = make(tmp_path, agent_max_context_turns=20)
    watcher = ConfigWatcher(holder, path, debounce_ms=50, tick_ms=200, environ=NO_ENV)
    await watcher.start()
    await asyncio.wait_for(watcher.ready.wait(), 2)
    yield path, holder, watcher
    await watcher.stop()


async def test_a_valid_edit_applies_within_two_seconds(watched, caplog):
    path, holder, _ = watched
    changes = []
    holder.on_change(lambda old, new: changes.append((old.agent_max_context_turns, new.agent_max_context_turns)))
    with caplog.at_level(logging.INFO, logger="config.watch"):
        write(path, {"data_dir": "data", "agent_max_context_turns": 7, "model": "gpt-4.1"})
        await wait_until(lambda: holder().agent_max_context_turns == 7)
    assert holder().model == "gpt-4.1"
    assert holder().data_dir == str(path.parent / "data")  # paths resolve as at start
    assert changes == [(20, 7)]
    assert "config.json reloaded: model, agent_max_context_turns changed" in caplog.text


async def test_an_edit_in_place_applies_too(watched):
    path, holder, _ = watched
    path.write_text(json.dumps({"data_dir": "data", "group_at_off": True}), encoding="utf-8")
    await wait_until(lambda: holder().group_at_off is True)
    assert holder().agent_max_context_turns == 20


@pytest.mark.parametrize(("content", "problem"), [
    ("", "config.json is empty; write {} in it for all defaults"),
    ("  \n", "config.json is empty; write {} in it for all defaults"),
    ('{"agent_max_context_turns": 7,', "is not valid JSON: Expecting property name enclosed in double quotes"),
    ({"agent_max_context_turns": "many"}, "invalid value for 'agent_max_context_turns': Input should be a valid "
                                          "integer (expected an integer)"),
    ({"agent_max_context_turn": 7}, "unknown config key 'agent_max_context_turn'; did you mean "
                                    "agent_max_context_turns?"),
])
async def test_an_invalid_edit_is_rejected_and_logged(watched, caplog, content, problem):
    path, holder, watcher = watched
    before = holder()
    with caplog.at_level(logging.ERROR, logger="config.watch"):
        write(path, content)
        await wait_until(lambda: "config.json change rejected" in caplog.text)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "config.watch"]
    assert problem in line
    assert line.endswith("; the previous settings stay in force")
    assert holder() is before
    # a later valid edit still applies, and the log says the repaired file is in force
    with caplog.at_level(logging.INFO, logger="config.watch"):
        write(path, {"data_dir": "data", "agent_max_context_turns": 9})
        await wait_until(lambda: holder().agent_max_context_turns == 9)
    assert "config.json is valid again: its settings are applied" in caplog.text


async def test_an_unknown_channel_is_rejected_by_the_check_the_app_gives(tmp_path, caplog):
    path, holder = make(tmp_path)
    watcher = ConfigWatcher(holder, path, debounce_ms=50, tick_ms=200, environ=NO_ENV, check=check_channel_type)
    before = holder()
    with caplog.at_level(logging.ERROR, logger="config.watch"):
        write(path, {"data_dir": "data", "channel_type": "telegarm"})
        assert watcher.check() is False
    assert holder() is before
    assert ("config.json change rejected: invalid value for 'channel_type': unknown channel 'telegarm': the known "
            "channels are dingtalk, feishu, telegram, terminal, web, wechat, wecom, weixin; did you mean 'telegram'?; "
            "the previous settings stay in force") in caplog.text


async def test_a_truncated_file_keeps_every_setting_until_it_is_repaired(tmp_path, caplog):
    path, holder = make(tmp_path, admin_users=["telegram:7"], agent_max_steps=4)
    watcher = ConfigWatcher(holder, path, debounce_ms=50, tick_ms=200, environ=NO_ENV)
    await watcher.start()
    await asyncio.wait_for(watcher.ready.wait(), 2)
    try:
        with caplog.at_level(logging.INFO, logger="config.watch"):
            path.write_text("", encoding="utf-8")  # an editor truncates before it writes
            await wait_until(lambda: "config.json change rejected" in caplog.text)
            assert holder().admin_users == ["telegram:7"] and holder().agent_max_steps == 4
            # the same settings written back: nothing changes, but the log says the file is good again
            path.write_text(json.dumps({"data_dir": "data", "admin_users": ["telegram:7"], "agent_max_steps": 4}),
                            encoding="utf-8")
            await wait_until(lambda: "valid again" in caplog.text)
        assert holder().admin_users == ["telegram:7"]
    finally:
        await watcher.stop()


async def test_restart_keys_are_logged_and_wait_for_a_restart(watched, caplog):
    path, holder, _ = watched
    with caplog.at_level(logging.INFO, logger="config.watch"):
        write(path, {"data_dir": "data", "telegram_mode": "webhook", "db_url": "sqlite:///other.db",
                     "agent_max_steps": 3})
        await wait_until(lambda: holder().agent_max_steps == 3)
    assert holder().telegram_mode == "polling" and holder().db_url == ""
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["config.json: telegram_mode, db_url changed; this takes effect after a restart"]


async def test_the_bots_own_write_does_not_apply_twice(watched):
    path, holder, watcher = watched
    calls = []
    holder.on_change(lambda old, new: calls.append(new.agent_max_steps))
    cfg, needs_restart = save_setting(path, "agent_max_steps", "4", environ=NO_ENV)
    assert needs_restart is False
    holder.replace(live_config(cfg, holder())[0])
    seen = watcher.checked
    await wait_until(lambda: watcher.checked > seen)
    assert calls == [4]
    assert holder().agent_max_steps == 4


async def test_check_ignores_an_unchanged_file(tmp_path):
    path, holder = make(tmp_path)
    watcher = ConfigWatcher(holder, path, environ=NO_ENV)
    assert watcher.check() is False
    assert watcher.checked == 0
    write(path, {"data_dir": "data", "model": "x"})
    assert watcher.check() is True
    assert watcher.check() is False
    assert watcher.checked == 1


async def test_stop_is_prompt_and_clean(tmp_path):
    path, holder = make(tmp_path)
    watcher = ConfigWatcher(holder, path, tick_ms=1000, environ=NO_ENV)
    await watcher.start()
    started = time.perf_counter()
    await watcher.stop()
    assert time.perf_counter() - started < 2.5
    await watcher.stop()  # a second stop is harmless


# --- save_setting and friends -------------------------------------------------------------------------
def test_parse_value():
    assert parse_value("30") == 30
    assert parse_value("true") is True
    assert parse_value('["a","b"]') == ["a", "b"]
    assert parse_value('"x y"') == "x y"
    assert parse_value("gpt-4o") == "gpt-4o"
    assert parse_value("1234", expects_text=True) == "1234"
    assert parse_value("  spaced words ") == "spaced words"


def test_with_setting_keeps_order_and_handles_plugin_keys():
    data = {"b": 1, "plugins": {"x": {"enabled": True}}, "a": 2}
    assert list(with_setting(data, "model", "m")) == ["b", "plugins", "a", "model"]
    assert with_setting(data, "plugins.x.level", 3)["plugins"] == {"x": {"enabled": True, "level": 3}}
    assert with_setting(data, "plugins.y", {"enabled": False})["plugins"]["y"] == {"enabled": False}
    assert data == {"b": 1, "plugins": {"x": {"enabled": True}}, "a": 2}  # not modified


def test_save_setting_validates_before_writing(tmp_path):
    path, _ = make(tmp_path, model="a")
    before = path.read_bytes()
    with pytest.raises(ConfigError, match="invalid value for 'cleanup_hour'"):
        save_setting(path, "cleanup_hour", "25", environ=NO_ENV)
    with pytest.raises(ConfigError, match="unknown config key 'modle'; did you mean model"):
        save_setting(path, "modle", "b", environ=NO_ENV)

    def refuse(cfg):
        raise ConfigError("refused by check")

    with pytest.raises(ConfigError, match="refused by check"):
        save_setting(path, "model", "b", environ=NO_ENV, check=refuse)
    assert path.read_bytes() == before


def test_environment_secrets_still_win_after_a_save(tmp_path):
    path, _ = make(tmp_path, open_ai_api_key="from-file")
    cfg, needs_restart = save_setting(path, "model", "m2", environ={"OPENAI_API_KEY": "from-env"})
    assert cfg.open_ai_api_key == "from-env"
    assert needs_restart is False
    saved = json.loads(path.read_text())
    assert saved["open_ai_api_key"] == "from-file" and saved["model"] == "m2"


@pytest.mark.parametrize(("key", "how"), [
    ("open_ai_api_key", "set the OPENAI_API_KEY environment variable or edit config.json by hand; "
                        "it takes effect after a restart"),
    ("telegram_bot_token", "set the TELEGRAM_BOT_TOKEN environment variable or edit config.json by hand; "
                           "it takes effect after a restart"),
    ("admin_password", "edit config.json by hand"),
])
def test_secrets_cannot_be_saved_from_a_chat(tmp_path, key, how):
    path, _ = make(tmp_path)
    before = path.read_bytes()
    with pytest.raises(ConfigError) as caught:
        save_setting(path, key, "s3cret-value", environ=NO_ENV)
    assert str(caught.value) == (f"{key} is a secret and cannot be set from a chat, where the platform and the "
                                 f"bot's journal would keep it: {how}")
    assert path.read_bytes() == before


@pytest.mark.parametrize("content", ["", "   \n", '{"data_dir": "data", "mod'])
def test_a_file_that_cannot_be_read_is_never_written_over(tmp_path, content):
    path, _ = make(tmp_path)
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match="is empty|is not valid JSON"):
        save_setting(path, "model", "m2", environ=NO_ENV)
    assert path.read_text(encoding="utf-8") == content


def test_a_value_past_the_size_limit_is_refused_at_once(tmp_path):
    path, _ = make(tmp_path)
    before = path.read_bytes()
    started = time.perf_counter()
    with pytest.raises(ConfigError) as caught:
        save_setting(path, "character_desc", "x" * 1_048_576, environ=NO_ENV)
    assert time.perf_counter() - started < 0.5
    assert str(caught.value) == "the value is 1,048,576 characters long; a setting holds at most 20,000"
    assert path.read_bytes() == before
    save_setting(path, "character_desc", "y" * 20_000, environ=NO_ENV)  # the limit itself is accepted


def test_a_crash_between_temp_write_and_replace_leaves_the_old_file(tmp_path, monkeypatch):
    path, _ = make(tmp_path, model="old")
    before = path.read_bytes()
    written = []

    def crash(src, dst):
        written.append(Path(src).read_text(encoding="utf-8"))  # the new content was fully written first
        raise OSError("power cut")

    monkeypatch.setattr(config_module.os, "replace", crash)
    with pytest.raises(OSError, match="power cut"):
        save_setting(path, "model", "new", environ=NO_ENV)
    assert json.loads(written[0])["model"] == "new"
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]
