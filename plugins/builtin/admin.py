"""Built-in plugin: ``/config`` (admins), ``/auth <password>`` (private chats) (DESIGN §1.4, §9 item 7) and
``/console`` (admins, private chats: a new one-time link to the web console, DESIGN §11).

``/config <key> <value>`` parses the value as JSON (a bare word is a string), validates the whole new
config before anything is written, writes config.json atomically keeping every other key in place, and
puts the change in force at once; restart-only keys are saved and say so.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dispatcher.commands import Services

from channels.registry import check_channel_type
from config.edit import get_setting, save_and_apply, setting_path, setting_value
from config.settings import KNOWN_KEYS, RESTART_KEYS, SECRET_KEYS, Config, load_config, mask_secret, masked
from core.errors import ConfigError
from dispatcher.admins import LOCKOUT_SECONDS
from dispatcher.commands import CommandRequest
from plugins.hookspecs import hookimpl

logger = logging.getLogger(__name__)

#: Longest value shown in the /config listing; /config <key> shows it whole.
LIST_VALUE_CHARS = 60


@hookimpl
def register_commands(register) -> None:
    """Register /config, /auth and /console."""
    register("config", config_command, "show settings; /config <key> <value> changes one", admin_only=True)
    register("auth", auth_command, "/auth <password> makes you an admin", private_only=True)
    register("console", console_command, "a new one-time link to the web console", admin_only=True,
             private_only=True)


# --- /config ------------------------------------------------------------------------------------------
def shown(key: str, value: Any, limit: int | None = None) -> str:
    """A setting's value for display: secrets masked, JSON otherwise."""
    if key.split(".")[0] in SECRET_KEYS and isinstance(value, str):
        return mask_secret(key.split(".")[0], value)
    text = json.dumps(masked(key.split(".")[0], value), ensure_ascii=False)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


async def config_command(request: CommandRequest) -> str:
    """``/config``, ``/config <key>`` or ``/config <key> <value>``."""
    holder = request.services.config
    parts = request.command.args.strip().split(maxsplit=1)
    if not parts:
        cfg = holder().model_dump()
        lines = ["Settings (secrets masked; * takes effect after a restart):"]
        for key in KNOWN_KEYS:
            mark = "*" if key in RESTART_KEYS else ""
            lines.append(f"{key}{mark} = {shown(key, cfg[key], LIST_VALUE_CHARS)}")
        lines.append("Show one with /config <key>; change one with /config <key> <value>.")
        return "\n".join(lines)
    key = parts[0]
    if len(parts) == 1:
        try:
            value = get_setting(holder(), key)
        except ConfigError as exc:
            return f"{_sentence(str(exc))}"
        if key not in RESTART_KEYS:
            return f"{key} = {shown(key, value)}"
        saved = _saved_value(holder, key)
        if saved is not _UNKNOWN and saved != value:
            return (f"{key} = {shown(key, saved)} in config.json; {shown(key, value)} runs until a restart "
                    "(this setting takes effect after a restart).")
        return f"{key} = {shown(key, value)} (changes take effect after a restart)"
    return await set_setting(request, key, parts[1])


_UNKNOWN = object()


def _saved_value(holder: Any, key: str) -> Any:
    """The value config.json holds now (environment secrets applied), or _UNKNOWN if the file cannot be read."""
    if holder.path is None:
        return _UNKNOWN
    try:
        return get_setting(load_config(holder.path), key)
    except ConfigError:
        return _UNKNOWN


async def set_setting(request: CommandRequest, key: str, raw: str) -> str:
    """Validate, save atomically and apply one setting; nothing changes on any error."""
    services = request.services
    holder = services.config
    if holder.path is None:
        return "There is no config file to write, so settings can only be shown."
    try:
        parts = setting_path(key)
        value = setting_value(holder.path, key, raw)
        cfg = save_and_apply(holder, {key: value}, check=_check(services, parts)).saved
    except ConfigError as exc:
        return f"Nothing changed: {_sentence(str(exc))}{_list_example(key, raw)}"
    except OSError as exc:
        logger.error("/config: cannot write %s: %s", holder.path, exc)
        return f"Nothing changed: config.json could not be written ({exc.strerror or exc})."
    needs_restart = parts[0] in RESTART_KEYS
    logger.info("/config: %s changed by %s%s", key, request.user_key, " (after restart)" if needs_restart else "")
    value = shown(key, get_setting(cfg, key))
    if needs_restart:
        return f"Saved {key} = {value}; it takes effect after a restart."
    return f"Set {key} = {value}."


def _check(services: Services, parts: list[str]) -> Callable[[Config], None]:
    """What the config model cannot check, before anything is written: ``channel_type`` against the channel
    registry, and plugin settings with the plugin's own model."""
    manager = services.plugins if parts[0] == "plugins" else None

    def check(cfg: Config) -> None:
        check_channel_type(cfg)
        if manager is None:
            return
        plugins = cfg.plugins if len(parts) == 1 else {parts[1]: cfg.plugins.get(parts[1], {})}
        error = manager.check_settings(plugins)
        if error:
            raise ConfigError(error)
    return check


def _list_example(key: str, raw: str) -> str:
    """For a list setting given a bare value: how the list is written."""
    field = Config.model_fields.get(key)
    if field is None or field.annotation != list[str] or raw.strip().startswith("["):
        return ""
    items = [item.strip().strip('"') for item in raw.split(",") if item.strip()]
    return f" A list is written in JSON, e.g. /config {key} {json.dumps(items, ensure_ascii=False)}"


def _sentence(text: str) -> str:
    return text if text.endswith((".", "?", "!")) else text + "."


# --- /auth --------------------------------------------------------------------------------------------
def _minutes(seconds: float) -> str:
    n = max(1, math.ceil(seconds / 60))
    return "1 minute" if n == 1 else f"{n} minutes"


async def auth_command(request: CommandRequest) -> str:
    """Grant admin rights to the sender when the password matches ``admin_password``."""
    services = request.services
    password = services.config().admin_password
    if not password:
        return "/auth is disabled: this bot has no admin password set."
    given = request.command.args.strip()
    if not given:
        return "Usage: /auth <password>"
    user = request.user_key
    guard = services.admins.guard
    left = guard.locked_for(user)
    if left:
        return f"Too many wrong passwords. Try again in {_minutes(left)}."
    if not hmac.compare_digest(given.encode("utf-8"), password.encode("utf-8")):
        logger.warning("/auth: wrong password from %s", user)
        if guard.fail(user):
            logger.warning("/auth: %s is locked out for %d minutes", user, LOCKOUT_SECONDS // 60)
            return f"Wrong password. Too many attempts: /auth is locked for you for {_minutes(LOCKOUT_SECONDS)}."
        return "Wrong password."
    guard.succeed(user)
    if request.is_admin:
        return "You are already an admin."
    await services.admins.grant(user)
    logger.info("/auth: %s is now an admin", user)
    return "You are now an admin."


# --- /console -----------------------------------------------------------------------------------------
async def console_command(request: CommandRequest) -> str:
    """``/console``: a new one-time link to the web console (also in bot.log and on the terminal)."""
    console = request.services.console
    if console is None:
        return ("The web console does not run in this process (web_console_port is 0, or it could not start, "
                "e.g. another bot process on this machine has the port: ask there); see bot.log.")
    msg = request.message
    return console.new_link(f"{msg.channel}:{msg.user_id}")
