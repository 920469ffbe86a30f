"""A plugin's settings (``config.plugins["<name>"]``), checked with its own ``Settings`` model.

Shared by the plugin manager and the channel registry (a channel's own settings live in the same place), so a
bad setting reads the same wherever it is found.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from core.suggest import did_you_mean


class PluginSettings(BaseModel):
    """The settings every plugin has; a plugin's own ``Settings`` model adds to these."""

    model_config = ConfigDict(extra="forbid", strict=True)

    enabled: bool = True


def settings_model(module: Any) -> type[BaseModel]:
    """The plugin's ``Settings`` model, with an ``enabled`` field added if it lacks one."""
    model: type[BaseModel] = getattr(module, "Settings", None) or PluginSettings
    return model if "enabled" in model.model_fields else _with_enabled(model)


@functools.cache
def _with_enabled(model: type[BaseModel]) -> type[BaseModel]:
    return create_model(f"{model.__name__}WithEnabled", __base__=model, enabled=(bool, True))


def validate_plugin_settings(name: str, module: Any, raw: Any) -> tuple[Any, str | None]:
    """Validate ``config.plugins[name]``; return ``(settings, None)`` or ``(None, one-line error)``."""
    if not isinstance(raw, dict):
        return None, f"invalid value for 'plugins.{name}': expected an object of settings"
    if not isinstance(raw.get("enabled", True), bool):
        return None, f"invalid value for 'plugins.{name}.enabled': expected true or false"
    model = settings_model(module)
    try:
        return model.model_validate(raw), None
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(["plugins", name, *(str(p) for p in err.get("loc", ()))])
        if err.get("type") == "extra_forbidden":
            key = str(err["loc"][-1]) if err.get("loc") else "?"
            tail = did_you_mean(key, model.model_fields, lambda hint: f"plugins.{name}.{hint}")
            return None, f"unknown setting {where!r}{tail}"
        return None, f"invalid value for {where!r}: {err.get('msg', 'invalid value')}"


__all__ = ["PluginSettings", "settings_model", "validate_plugin_settings"]
