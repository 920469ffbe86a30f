"""console/config_page.py: the form's fields from the config model, and saving only what changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config.edit import save_and_apply, write_settings
from config.help import KEY_HELP
from config.settings import KNOWN_KEYS, Config, ConfigHolder, load_config
from console.config_page import changed_settings, fields, file_digest, parse_field, shown_value
from core.errors import ConfigError


def test_every_key_has_a_field_of_its_kind() -> None:
    kinds = {f["key"]: f["kind"] for f in fields(Config().model_dump())}
    assert list(kinds) == list(KNOWN_KEYS)
    assert kinds["agent_max_context_turns"] == "int"
    assert kinds["stream_replies"] == "bool"
    assert kinds["telegram_mode"] == "choice"
    assert kinds["character_desc"] == "longtext"
    assert kinds["group_chat_prefix"] == "json" and kinds["channel_type"] == "json" and kinds["plugins"] == "json"
    assert {k for k, kind in kinds.items() if kind == "secret"} == {
        "open_ai_api_key", "telegram_bot_token", "admin_password", "web_console_password",
        "wecom_secret", "wecom_token", "wecom_aes_key", "feishu_app_secret", "dingtalk_client_secret"}


def test_strings_are_shown_bare_and_read_back_as_the_same_value() -> None:
    cfg = Config(channel_type="telegram", vision="auto", single_chat_prefix=[""]).model_dump()
    shown = {f["key"]: f for f in fields(cfg)}
    assert shown["channel_type"]["value"] == "telegram"  # not "\"telegram\""
    assert shown["vision"]["value"] == "auto"
    assert shown["single_chat_prefix"]["value"] == '[""]'  # a list stays JSON
    for key in ("channel_type", "vision"):
        assert parse_field(key, shown[key]["value"]) == cfg[key]
    # a string the field would read back as something else keeps its quotes
    assert shown_value("json", "true") == '"true"' and shown_value("json", " x") == '" x"'
    assert shown_value("json", "12") == '"12"' and parse_field("channel_type", '"12"') == "12"


def test_every_field_has_its_help_from_the_settings_model() -> None:
    shown = {f["key"]: f["help"] for f in fields(Config().model_dump())}
    assert all(shown.values()), [k for k, v in shown.items() if not v]
    assert shown["agent_max_context_turns"] == KEY_HELP["agent_max_context_turns"]


def test_a_secret_field_never_holds_the_secret() -> None:
    shown = {f["key"]: f for f in fields(Config(open_ai_api_key="sk-abcdef123456").model_dump())}
    assert shown["open_ai_api_key"]["value"] == "" and shown["open_ai_api_key"]["is_set"] is True
    assert shown["admin_password"]["is_set"] is False
    assert shown["open_ai_api_key"]["env"] == "OPENAI_API_KEY"


def test_values_are_read_as_config_does() -> None:
    assert parse_field("agent_max_context_turns", "12") == 12
    assert parse_field("agent_max_context_turns", "twelve") == "twelve"  # the model names the key later
    assert parse_field("stream_replies", "false") is False
    assert parse_field("group_chat_prefix", '["@bot", "bot,"]') == ["@bot", "bot,"]
    assert parse_field("channel_type", "telegram") == "telegram"  # a bare word, as with /config
    assert parse_field("character_desc", "line one\r\nline two") == "line one\nline two"
    with pytest.raises(ConfigError, match="invalid value for 'stream_replies'"):
        parse_field("stream_replies", "maybe")


def test_only_changed_keys_are_saved_and_every_other_key_keeps_its_place(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    original = {"model": "m1", "data_dir": "data", "group_chat_keyword": ["weather"], "open_ai_api_key": "sk-1234567"}
    path.write_text(json.dumps(original, indent=2), encoding="utf-8")
    current = Config.model_validate(original).model_dump()
    form = {f"k:{f['key']}": f["value"] for f in fields(current)}  # the form as loaded
    assert changed_settings(form, current) == {}  # an untouched form changes nothing (empty secrets kept)
    form["k:agent_max_context_turns"] = "2"
    form["k:admin_password"] = "new-admin-pass"
    changes = changed_settings(form, current)
    assert changes == {"agent_max_context_turns": 2, "admin_password": "new-admin-pass"}
    digest = file_digest(path)
    holder = ConfigHolder(load_config(path), path)
    applied = save_and_apply(holder, {**changes, "telegram_mode": "webhook"})  # the one save /config uses too
    assert applied.saved.agent_max_context_turns == 2 == holder().agent_max_context_turns  # in force at once
    assert applied.saved.telegram_mode == "webhook" and holder().telegram_mode == "polling"  # after a restart
    assert applied.pending == ("telegram_mode",)
    assert applied.restart_note() == " telegram_mode take(s) effect after a restart."
    saved = json.loads(path.read_text(encoding="utf-8"))
    assert saved == {**original, "agent_max_context_turns": 2, "admin_password": "new-admin-pass",
                     "telegram_mode": "webhook"}
    assert list(saved)[:4] == list(original)
    assert file_digest(path) != digest


def test_an_invalid_value_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model": "m1"}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="invalid value for 'agent_max_context_turns'"):
        write_settings(path, {"agent_max_context_turns": 0})
    with pytest.raises(ConfigError, match="invalid value for 'cleanup_hour'"):
        write_settings(path, {"cleanup_hour": "twelve"})
    assert path.read_text(encoding="utf-8") == '{"model": "m1"}\n'
