"""config/mcp_servers.py: ``mcp_servers`` entries validated with clear lines, their env and headers values kept
secret in /config, the console's form, the log redactor and chat edits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bootstrap.preflight import Redactor
from config.edit import save_setting
from config.settings import Config, masked, validate_data
from console.config_page import changed_settings, fields
from core.errors import ConfigError
from dispatcher.commands import parse_command, secret_free

TOKEN = "tok-0123456789abcdefXYZ1"
BEARER = "Bearer hdr-abcdefghijklmnopQRS2"
SERVERS = {
    "time": {"command": "python", "args": ["-m", "mcp_server_time"], "env": {"TIME_TOKEN": TOKEN}},
    "docs": {"url": "https://docs.example/mcp", "headers": {"Authorization": BEARER}, "timeout_seconds": 5,
             "tools": {"deny": ["delete_all"]}, "chats": ["telegram:group:-100", "telegram:42"]},
    "old": {"url": "https://old.example/sse", "transport": "sse", "enabled": False},
}


def test_the_entries_people_paste_are_read_with_their_defaults() -> None:
    cfg = validate_data({"mcp_servers": SERVERS})
    time, docs, old = (cfg.mcp_servers[n] for n in ("time", "docs", "old"))
    assert (time.kind, time.timeout_seconds, time.enabled, time.chats) == ("stdio", 30.0, True, None)
    assert (docs.kind, docs.timeout_seconds, docs.chats) == ("http", 5.0, ["telegram:group:-100", "telegram:42"])
    assert docs.tools.permits("search") and not docs.tools.permits("delete_all")
    assert (old.kind, old.enabled) == ("sse", False)
    vscode = validate_data({"mcp_servers": {"v": {"type": "http", "url": "http://127.0.0.1:1/mcp"}}})
    assert vscode.mcp_servers["v"].kind == "http"
    assert Config().tools_window_share == 0.15


@pytest.mark.parametrize(("entry", "message"), [
    ({"comand": "x"}, "invalid value for 'mcp_servers': server 'a': unknown key 'comand'; did you mean command?"),
    ({}, 'server \'a\': give either "command" (a program to run) or "url" (a server over HTTP)'),
    ({"command": "x", "url": "http://h/mcp"}, "give either"),
    ({"url": "ftp://h"}, "\"url\" must start with http:// or https://, got 'ftp://h'"),
    ({"command": "x", "transport": "sse"}, "\"transport\" 'sse' needs a \"url\""),
    ({"command": "x", "tools": {"allow": ["a"], "deny": ["b"]}}, 'give "allow" or "deny", not both'),
    ({"command": "x", "timeout_seconds": 0}, "server 'a': timeout_seconds: Input should be greater than 0"),
    ({"command": "x", "env": {"K": 1}}, "server 'a': env.K: Input should be a valid string"),
])
def test_a_bad_entry_is_one_line_naming_the_server_and_the_key(entry, message) -> None:
    with pytest.raises(ConfigError) as caught:
        validate_data({"mcp_servers": {"a": entry}})
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_server_name_must_make_tool_names_the_api_accepts() -> None:
    for name in ("my server", "a__b", "x" * 31):
        with pytest.raises(ConfigError, match="use 1-30 letters"):
            validate_data({"mcp_servers": {name: {"command": "x"}}})


def test_env_and_headers_values_are_masked_for_display() -> None:
    shown = json.dumps(masked("mcp_servers", validate_data({"mcp_servers": SERVERS}).model_dump()["mcp_servers"]))
    assert TOKEN not in shown and BEARER not in shown and "hdr-abcdefghijklmnopQRS2" not in shown
    assert '"TIME_TOKEN": "\\u2026XYZ1"' in shown and '"Authorization": "\\u2026QRS2"' in shown
    assert '"args": ["-m", "mcp_server_time"]' in shown  # the rest as it is, without the defaults
    assert "timeout_seconds\": 30" not in shown


def test_the_redactor_masks_them_in_log_lines() -> None:
    redact = Redactor()
    redact.update(validate_data({"mcp_servers": SERVERS}))
    line = redact(f"env {TOKEN}; header {BEARER}; token alone hdr-abcdefghijklmnopQRS2")
    assert line == "env [secret]; header [secret]; token alone [secret]"


def test_the_console_form_shows_them_masked_and_an_untouched_form_keeps_them(tmp_path: Path) -> None:
    current = validate_data({"mcp_servers": SERVERS}).model_dump()
    form = {f"k:{f['key']}": f["value"] for f in fields(current)}
    assert TOKEN not in form["k:mcp_servers"] and "…XYZ1" in form["k:mcp_servers"]
    assert changed_settings(form, current) == {}
    edited = json.loads(form["k:mcp_servers"])
    edited["time"]["timeout_seconds"] = 9
    form["k:mcp_servers"] = json.dumps(edited)
    changes = changed_settings(form, current)
    assert changes["mcp_servers"]["time"]["env"] == {"TIME_TOKEN": TOKEN}  # the masked value stood for the secret
    assert changes["mcp_servers"]["time"]["timeout_seconds"] == 9


def test_a_chat_cannot_type_a_secret_into_them_but_can_change_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"mcp_servers": SERVERS}), encoding="utf-8")
    typed = json.dumps({**SERVERS, "time": {**SERVERS["time"], "env": {"TIME_TOKEN": "a-new-secret-value"}}})
    with pytest.raises(ConfigError, match="values in env and headers are secrets and cannot be set from a chat"):
        save_setting(path, "mcp_servers", typed, environ={})
    assert json.loads(path.read_text(encoding="utf-8")) == {"mcp_servers": SERVERS}
    shown = masked("mcp_servers", validate_data({"mcp_servers": SERVERS}).model_dump()["mcp_servers"])
    shown["docs"]["enabled"] = False
    cfg, _restart = save_setting(path, "mcp_servers", json.dumps(shown), environ={})
    assert cfg.mcp_servers["docs"].enabled is False
    assert cfg.mcp_servers["docs"].headers == {"Authorization": BEARER}
    saved = json.loads(path.read_text(encoding="utf-8"))["mcp_servers"]
    assert saved["time"]["env"] == {"TIME_TOKEN": TOKEN}
    # and the journal never keeps what was typed after /config mcp_servers
    assert secret_free(parse_command(f"/config mcp_servers {typed}")) == "/config mcp_servers ***"


def test_a_relative_cwd_is_the_config_files_folder(tmp_path: Path) -> None:
    from config.settings import load_config

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"mcp_servers": {"a": {"command": "x", "cwd": "tools"},
                                                "b": {"command": "x", "cwd": "/srv"}}}), encoding="utf-8")
    cfg = load_config(path, environ={})
    assert cfg.mcp_servers["a"].cwd == str((tmp_path / "tools").resolve())
    assert cfg.mcp_servers["b"].cwd == "/srv"
