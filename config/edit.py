"""Editing config.json (``/config`` and the web console): parse a typed value, find its path, check it with the
config model, save the file atomically with every other key kept as it was, and put it in force
(:func:`save_and_apply`, the one save both use)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import config.cowagent
from config.mcp_servers import added_secrets
from config.settings import (
    KNOWN_KEYS,
    MAX_VALUE_CHARS,
    NESTED_SECRET_KEYS,
    RESTART_KEYS,
    SECRET_KEYS,
    Config,
    ConfigHolder,
    apply_environment,
    atomic_write_json,
    live_config,
    read_file_data,
    resolve_paths,
    secret_refusal,
    translate_cowagent,
    unmasked,
    validate_data,
)
from core.errors import ConfigError
from core.suggest import did_you_mean


def parse_value(raw: str, expects_text: bool = False) -> Any:
    """A /config value: JSON (``30``, ``true``, ``["a","b"]``, ``"x"``), else the text itself.

    For a text setting, a bare value that parses as another JSON type (``/config admin_password 1234``)
    is taken as text too.
    """
    text = raw.strip()
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return text
    if expects_text and not isinstance(value, str):
        return text
    return value


def setting_path(key: str) -> list[str]:
    """Split a setting name: a top-level key, or ``plugins.<name>.<key>``. Raise :class:`ConfigError`."""
    parts = key.split(".")
    foreign = config.cowagent.setting_error(parts[0], KNOWN_KEYS)
    if foreign:
        raise ConfigError(foreign)
    if parts[0] not in KNOWN_KEYS:
        raise ConfigError(f"unknown config key {parts[0]!r}{did_you_mean(parts[0], KNOWN_KEYS)}")
    if len(parts) > 1 and (parts[0] != "plugins" or len(parts) > 3 or not all(parts)):
        raise ConfigError(f"unknown config key {key!r}; only plugin settings have dotted names, "
                          "as in plugins.<name>.<key>")
    return parts


def get_setting(cfg: Config | dict[str, Any], key: str) -> Any:
    """The value of a (possibly dotted) setting; raise :class:`ConfigError` when it is unknown or unset."""
    parts = setting_path(key)
    value: Any = cfg.model_dump() if isinstance(cfg, Config) else cfg
    for i, part in enumerate(parts):
        if not isinstance(value, dict) or part not in value:
            raise ConfigError(f"{'.'.join(parts[:i + 1])!r} is not set")
        value = value[part]
    return value


def with_setting(data: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """A copy of ``data`` with one setting replaced (or added at the end); every other key keeps its place."""
    parts = setting_path(key)
    out = dict(data)
    if len(parts) == 1:
        out[parts[0]] = value
        return out
    plugins = out.get("plugins")
    plugins = dict(plugins) if isinstance(plugins, dict) else {}
    if len(parts) == 2:
        plugins[parts[1]] = value
    else:
        section = plugins.get(parts[1])
        section = dict(section) if isinstance(section, dict) else {}
        section[parts[2]] = value
        plugins[parts[1]] = section
    out["plugins"] = plugins
    return out


def setting_value(path: Path, key: str, raw_value: str) -> Any:
    """The value ``/config <key> <raw_value>`` stands for; raise :class:`ConfigError` for a secret, a value too long,
    or a nested secret added from a chat. A masked nested secret stands for the one in the file."""
    parts = setting_path(key)
    if parts[0] in SECRET_KEYS:
        raise ConfigError(secret_refusal(parts[0]))
    if len(raw_value) > MAX_VALUE_CHARS:
        raise ConfigError(f"the value is {len(raw_value):,} characters long; a setting holds at most "
                          f"{MAX_VALUE_CHARS:,}")
    field = Config.model_fields.get(parts[0])
    value = parse_value(raw_value, expects_text=len(parts) == 1 and field is not None and field.annotation is str)
    if parts[0] in NESTED_SECRET_KEYS:
        # a file that cannot be read (empty, half-written, bad JSON) raises here: it is never written over
        current = read_file_data(path).get(parts[0])
        # the value may be the masked one /config showed: a masked secret stands for the one in the file
        value = unmasked(parts[0], value, current)
        if added_secrets(value, current):
            raise ConfigError(f"{parts[0]}: values in env and headers are secrets and cannot be set from a chat, "
                              "where the platform and the bot's journal would keep them: edit config.json by hand")
    return value


def write_settings(path: str | Path, changes: dict[str, Any], *, environ: dict[str, str] | None = None,
                   check: Callable[[Config], None] | None = None) -> Config:
    """config.json with ``changes`` applied (each key possibly dotted, ``plugins.<name>.<key>``), validated, then
    written atomically; return the new config. Every other key keeps its place and value.

    The new config is validated before anything is written (and by ``check(config)`` too, if given, which raises
    :class:`ConfigError`); environment secrets still win and paths are resolved, as in :func:`load_config`. On
    any error nothing is written.
    """
    path = Path(path).expanduser().resolve()
    data = read_file_data(path)  # a file that cannot be read raises here: it is never written over
    for key, value in changes.items():
        data = with_setting(data, key, value)
    translated = translate_cowagent(data)
    validate_data(translated)  # what is written must be valid on its own
    cfg = resolve_paths(validate_data(apply_environment(translated, environ)), path.parent)
    if check is not None:
        check(cfg)
    atomic_write_json(path, data)
    return cfg


@dataclass(frozen=True, slots=True)
class Applied:
    """A saved change: the config as written, the one in force now, and the restart-only keys that wait."""

    saved: Config
    live: Config
    #: restart-only keys whose new value is saved and takes effect after a restart
    pending: tuple[str, ...]

    def restart_note(self) -> str:
        """" <keys> take(s) effect after a restart." when some wait for one, else ""."""
        return f" {', '.join(self.pending)} take(s) effect after a restart." if self.pending else ""


def save_and_apply(holder: ConfigHolder, changes: dict[str, Any], *,
                   check: Callable[[Config], None] | None = None) -> Applied:
    """The one config save of ``/config`` and the web console: validate config.json with ``changes`` applied, write
    it atomically (:func:`write_settings`), and put it in force at once, restart-only keys kept at their running
    values until a restart (:func:`live_config`). Raise :class:`ConfigError` (nothing written, nothing applied)
    or ``OSError`` (the file could not be written)."""
    if holder.path is None:
        raise ConfigError("there is no config file to write")
    saved = write_settings(holder.path, changes, check=check)
    live, pending = live_config(saved, holder())
    holder.replace(live)
    return Applied(saved, live, tuple(pending))


def save_setting(path: str | Path, key: str, raw_value: str, *, environ: dict[str, str] | None = None,
                 check: Callable[[Config], None] | None = None) -> tuple[Config, bool]:
    """Validate one changed setting (``/config``'s text), then write config.json atomically; return ``(new config,
    needs restart)``. Nothing is written on any error (:func:`write_settings`)."""
    path = Path(path).expanduser().resolve()
    value = setting_value(path, key, raw_value)
    return write_settings(path, {key: value}, environ=environ, check=check), setting_path(key)[0] in RESTART_KEYS
