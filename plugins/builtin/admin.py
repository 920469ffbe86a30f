"""Built-in plugin: ``/config`` (admins) and ``/auth <password>`` (private chats) (DESIGN §1.4, §9 item 7).

``/config <key> <value>`` parses the value as JSON (a bare word is a string), validates the whole new
config before anything is written, writes config.json atomically keeping every other key in place, and
puts the change in force at once; restart-only keys are saved and say so.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from config.settings import (
    KNOWN_KEYS,
    RESTART_KEYS,
    SECRET_KEYS,
    Config,
    atomic_write_json,
    get_setting,
    live_config,
    load_config,
    mask_secret,
    save_setting,
    setting_path,
)
from core.errors import ConfigError
from dispatcher.commands import CommandRequest
from plugins.hookspecs import hookimpl

logger = logging.getLogger(__name__)

#: Longest value shown in the /config listing; /config <key> shows it whole.
LIST_VALUE_CHARS = 60
MAX_FAILURES = 5
FAILURE_WINDOW = 600.0
LOCKOUT_SECONDS = 600.0


@hookimpl
def register_commands(register) -> None:
    """Register /config and /auth."""
    register("config", config_command, "show settings; /config <key> <value> changes one", admin_only=True)
    register("auth", auth_command, "/auth <password> makes you an admin", private_only=True)


# --- /config ------------------------------------------------------------------------------------------
def shown(key: str, value: Any, limit: int | None = None) -> str:
    """A setting's value for display: secrets masked, JSON otherwise."""
    if key.split(".")[0] in SECRET_KEYS and isinstance(value, str):
        return mask_secret(key.split(".")[0], value)
    text = json.dumps(value, ensure_ascii=False)
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
        cfg, needs_restart = save_setting(holder.path, key, raw, check=_plugin_check(services, parts))
    except ConfigError as exc:
        return f"Nothing changed: {_sentence(str(exc))}{_list_example(key, raw)}"
    except OSError as exc:
        logger.error("/config: cannot write %s: %s", holder.path, exc)
        return f"Nothing changed: config.json could not be written ({exc.strerror or exc})."
    live, _pending = live_config(cfg, holder())
    holder.replace(live)
    logger.info("/config: %s changed by %s%s", key, request.user_key, " (after restart)" if needs_restart else "")
    value = shown(key, get_setting(cfg, key))
    if needs_restart:
        return f"Saved {key} = {value}; it takes effect after a restart."
    return f"Set {key} = {value}."


def _plugin_check(services: Any, parts: list[str]) -> Callable[[Any], None] | None:
    """For plugin settings: validate them with the plugin's own model before anything is written."""
    manager = getattr(services, "plugins", None)
    if parts[0] != "plugins" or manager is None:
        return None

    def check(cfg: Any) -> None:
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
class AuthGuard:
    """Counts wrong passwords per user: after 5 within 10 minutes, that user is locked out for 10 minutes.

    With a ``path``, failures and lockouts are kept in a small JSON file (owner-only), so a restart does
    not reset them: a lockout that a restart lifts only slows guessing down by a restart. A file beside
    the database rather than a table: the state is a few lines, only /auth reads it, and it needs no
    migration (processes sharing one PostgreSQL each keep their own, a looser but still bounded limit).
    """

    def __init__(self, clock: Callable[[], float] = time.time, path: Path | None = None) -> None:
        self.clock = clock
        self.path = path
        self._failures: dict[str, deque[float]] = {}
        self._locked_until: dict[str, float] = {}
        self._load()

    def locked_for(self, user_key: str) -> float:
        """Seconds the user is still locked out (0 when not)."""
        until = self._locked_until.get(user_key)
        if until is None:
            return 0.0
        left = until - self.clock()
        if left <= 0:
            del self._locked_until[user_key]
            self._save()
            return 0.0
        return left

    def fail(self, user_key: str) -> bool:
        """Count a wrong password; True when this locks the user out."""
        now = self.clock()
        failures = self._failures.setdefault(user_key, deque())
        failures.append(now)
        while failures and failures[0] <= now - FAILURE_WINDOW:
            failures.popleft()
        locked = len(failures) >= MAX_FAILURES
        if locked:
            self._locked_until[user_key] = now + LOCKOUT_SECONDS
            del self._failures[user_key]
        self._save()
        return locked

    def succeed(self, user_key: str) -> None:
        """Forget the user's failures."""
        if self._failures.pop(user_key, None) is not None:
            self._save()

    def _load(self) -> None:
        if self.path is None:
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            now = self.clock()
            self._locked_until = {str(k): float(v) for k, v in data.get("locked_until", {}).items() if v > now}
            self._failures = {str(k): deque(float(t) for t in v if t > now - FAILURE_WINDOW)
                              for k, v in data.get("failures", {}).items()}
        except FileNotFoundError:
            return
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            logger.warning("/auth: cannot read %s (%s); starting with no lockouts", self.path, exc)

    def _save(self) -> None:
        if self.path is None:
            return
        data = {"locked_until": self._locked_until,
                "failures": {k: list(v) for k, v in self._failures.items() if v}}
        try:
            atomic_write_json(self.path, data)  # mkstemp: created owner-only
        except OSError as exc:
            logger.warning("/auth: cannot save lockouts to %s: %s", self.path, exc.strerror or exc)


#: The file under data_dir that keeps /auth failures and lockouts across restarts.
LOCKOUT_FILE = "auth_lockouts.json"


def auth_guard(services: Any) -> AuthGuard:
    """The app's guard (kept in ``services.extras``, so a plugin reload does not reset a lockout)."""
    guard = services.extras.get("auth_guard")
    if guard is None:
        path = services.config().data_path() / LOCKOUT_FILE
        guard = services.extras["auth_guard"] = AuthGuard(path=path)
    return guard


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
    guard = auth_guard(services)
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
    await services.store.grant_admin(user)
    services.dispatcher.admin_grants.add(user)
    logger.info("/auth: %s is now an admin", user)
    return "You are now an admin."
