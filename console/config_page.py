"""The config page: a form built from the config model, saved with the same validation and atomic write as
``/config``, and put in force the same way (restart-only keys wait for a restart).

Only the keys whose value the form changes are written; every other key of config.json keeps its place and
value. The page carries a fingerprint of config.json as it was loaded: a save is refused, with the values
entered kept in the form, when the file changed since (another admin, an editor, ``/config``). Secrets
are never shown: their field is empty, and a value typed there replaces the secret.
"""

from __future__ import annotations

import hashlib
import json
import logging
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web
from yarl import URL

from channels.registry import check_channel_type
from config.edit import parse_value, save_and_apply
from config.help import KEY_HELP
from config.settings import (
    ENV_OVERRIDES,
    KNOWN_KEYS,
    NESTED_SECRET_KEYS,
    RESTART_KEYS,
    SECRET_KEYS,
    Config,
    masked,
    read_file_data,
    translate_cowagent,
    unmasked,
    validate_data,
)
from console.server import console_of
from core.errors import ConfigError

if TYPE_CHECKING:
    from config.settings import Config
    from dispatcher.commands import Services

logger = logging.getLogger(__name__)

LONG_TEXT_KEYS = frozenset({"character_desc"})
_ENV_OF = {key: var for var, key in ENV_OVERRIDES.items()}


def field_kind(key: str) -> str:
    """How the form shows a key: ``secret``, ``bool``, ``int``, ``choice``, ``text``, ``longtext`` or ``json``."""
    if key in SECRET_KEYS:
        return "secret"
    ann = Config.model_fields[key].annotation
    if ann is bool:
        return "bool"
    if ann is int:
        return "int"
    if typing.get_origin(ann) is typing.Literal:
        return "choice"
    if ann is str:
        return "longtext" if key in LONG_TEXT_KEYS else "text"
    return "json"


def shown_value(kind: str, value: Any) -> str:
    """A value as the form's field holds it."""
    if kind == "secret":
        return ""
    if kind == "bool":
        return "true" if value else "false"
    if kind in ("int", "text", "longtext", "choice"):
        return str(value)
    if isinstance(value, str) and parse_value(value) == value:
        return value  # a string bare ("telegram", "auto"), as the field reads it back; "true" or " x" stay quoted
    return json.dumps(value, ensure_ascii=False)


def file_digest(path: Path) -> str:
    """A fingerprint of config.json's bytes ('' when there is no file)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return ""


def file_settings(path: Path) -> dict[str, Any]:
    """The settings config.json holds (defaults filled in, environment not applied)."""
    return validate_data(translate_cowagent(read_file_data(path))).model_dump()


def fields(values: dict[str, Any], entered: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The form's fields, in the model's order."""
    out = []
    for key in KNOWN_KEYS:
        kind = field_kind(key)
        ann = Config.model_fields[key].annotation
        out.append({
            "key": key, "kind": kind, "restart": key in RESTART_KEYS,
            "value": entered[key] if entered is not None and key in entered and kind != "secret"
            else shown_value(kind, masked(key, values.get(key))),
            "choices": typing.get_args(ann) if kind == "choice" else (),
            "is_set": bool(values.get(key)) if kind == "secret" else None,
            "env": _ENV_OF.get(key),
            "help": KEY_HELP.get(key, ""),
        })
    return out


def add_routes(router: web.UrlDispatcher) -> None:
    """Register the config page."""
    router.add_get("/config", config_form)
    router.add_post("/config", save_config)


async def config_form(request: web.Request) -> web.StreamResponse:
    """The settings of config.json in a form."""
    console = console_of(request)
    path = console.services.config.path
    if path is None:
        return console.render(request, "message.html", title="Config", message="There is no config file to edit.")
    try:
        values = file_settings(path)
    except ConfigError as exc:
        return console.render(request, "message.html", title="Config", status=409,
                              message=f"config.json cannot be edited here now: {exc}. Fix it by hand first.")
    return console.render(request, "config.html", title="Config", fields=fields(values), digest=file_digest(path),
                          notice=request.query.get("notice", ""))


def parse_field(key: str, raw: str) -> Any:
    """The value a form field stands for; raise :class:`ConfigError` naming the key when it cannot be read."""
    kind = field_kind(key)
    raw = raw.replace("\r\n", "\n")
    if kind == "bool":
        if raw not in ("true", "false"):
            raise ConfigError(f"invalid value for {key!r}: expected true or false")
        return raw == "true"
    if kind == "int":
        return parse_value(raw)  # not a number: the model names the key and the type
    if kind in ("text", "longtext", "choice", "secret"):
        return raw
    return parse_value(raw)  # JSON, else the bare text, as with /config; the model names a wrong type


def changed_settings(form: Any, current: dict[str, Any]) -> dict[str, Any]:
    """The keys whose submitted value differs from config.json's; empty secret fields keep the secret."""
    changes = {}
    for key in KNOWN_KEYS:
        raw = form.get(f"k:{key}")
        if raw is None or (field_kind(key) == "secret" and raw == ""):
            continue
        value = unmasked(key, parse_field(key, str(raw)), current.get(key))
        if key in NESTED_SECRET_KEYS:  # compared as validated: the form shows the entries without defaults
            try:
                if validate_data({key: value}).model_dump()[key] == current.get(key):
                    continue
            except ConfigError:
                pass  # invalid: saving it reports the error
        if value != current.get(key):
            changes[key] = value
    return changes


async def save_config(request: web.Request) -> web.StreamResponse:
    """Save the changed settings and put them in force; refused when the file changed since the page loaded."""
    console = console_of(request)
    services = console.services
    holder = services.config
    path = holder.path
    form = await request.post()
    entered = {k[2:]: str(v) for k, v in form.items() if k.startswith("k:")}

    def again(error: str, status: int = 400) -> web.Response:
        try:
            values = file_settings(path)
        except ConfigError:
            values = holder().model_dump()
        return console.render(request, "config.html", status=status, title="Config", error=error,
                              fields=fields(values, entered), digest=str(form.get("digest", "")))

    if path is None:
        return console.render(request, "message.html", title="Config", message="There is no config file to edit.")
    if file_digest(path) != form.get("digest"):
        return again("Nothing saved: config.json changed since this page was loaded. Your values are still in the "
                     "form; reload the page to see the file as it is now, then apply your change again.", 409)
    try:
        changes = changed_settings(form, file_settings(path))
        if not changes:
            raise web.HTTPSeeOther(str(URL("/config").with_query(notice="Nothing changed.")))
        applied = save_and_apply(holder, changes, check=_check(services, changes))
    except ConfigError as exc:
        return again(f"Nothing saved: {str(exc).rstrip('.')}.")
    except OSError as exc:
        logger.error("web console: cannot write %s: %s", path, exc)
        return again(f"Nothing saved: config.json could not be written ({exc.strerror or exc}).", 500)
    logger.info("web console: config changed: %s%s", ", ".join(changes),
                f" ({', '.join(applied.pending)} after a restart)" if applied.pending else "")
    notice = f"Saved: {', '.join(changes)}.{applied.restart_note()}"
    raise web.HTTPSeeOther(str(URL("/config").with_query(notice=notice)))


def _check(services: Services, changes: dict[str, Any]) -> Callable[[Config], None]:
    """What the config model cannot check, before anything is written: ``channel_type`` against the channel
    registry, and plugin settings with each plugin's own model."""
    manager = services.plugins if "plugins" in changes else None

    def check(cfg: Config) -> None:
        check_channel_type(cfg)
        if manager is None:
            return
        error = manager.check_settings(cfg.plugins)
        if error:
            raise ConfigError(error)
    return check
