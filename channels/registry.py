"""The channel registry: every channel the bot can run, by the name ``channel_type`` uses.

A channel module registers its class (or any factory) with :func:`register_channel`, in the manner of
AstrBot's ``register_platform_adapter``. A factory is called with the keyword arguments it names, out of
``config`` (the :class:`config.Config` in force at start), ``settings`` (its own, below), ``services`` (the
application's parts, :class:`dispatcher.commands.Services`) and the few parts the built-in channels take
instead of all of them: ``commands`` (the command registry, for a command menu), ``window`` (``window(model)``
describes the model's context window) and ``keep_line`` (``keep_line(text)`` is False for a typed line that
holds a secret). So a channel takes only what it needs, and channels stay below the dispatcher.

Where a channel lives is known before it is imported, so that naming one channel never imports the
others' platform libraries, and ``channel_type`` can be checked without importing any:

- built-in channels are listed in :data:`BUILTIN_CHANNELS` (name -> module);
- third-party channels are installed packages with an entry point in the ``longchat.channels`` group,
  whose name is the channel name and whose value is the module (which registers the channel on import)
  or the factory itself (``"irc_channel:IRCChannel"``).
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from channels.base import BaseChannel
from config.plugin_settings import validate_plugin_settings
from core.errors import ConfigError
from core.suggest import did_you_mean

if TYPE_CHECKING:
    from config.settings import Config

logger = logging.getLogger(__name__)

#: The entry-point group third-party channels register in.
ENTRY_POINT_GROUP = "longchat.channels"
#: The built-in channels: name -> the module that registers it.
BUILTIN_CHANNELS: dict[str, str] = {
    "terminal": "channels.terminal",
    "telegram": "channels.telegram.channel",
    "wechat": "channels.wechat.channel",
    "weixin": "channels.weixin.channel",
    "wecom": "channels.wecom.channel",
    "web": "channels.web.channel",
    "feishu": "channels.feishu.channel",
    "dingtalk": "channels.dingtalk.channel",
}
#: The package a built-in channel's platform library comes from, to name it when it cannot be imported.
BUILTIN_REQUIREMENTS: dict[str, str] = {"telegram": "python-telegram-bot", "wechat": "itchat-uos",
                                        "wecom": "wechatpy", "feishu": "lark-oapi", "dingtalk": "dingtalk-stream"}

ChannelFactory = Callable[..., Any]

_factories: dict[str, ChannelFactory] = {}


def register_channel(name: str) -> Callable[[ChannelFactory], ChannelFactory]:
    """Decorator: register a channel class (or factory) under ``name``; returns it unchanged."""

    def wrap(factory: ChannelFactory) -> ChannelFactory:
        register(name, factory)
        return factory

    return wrap


def register(name: str, factory: ChannelFactory) -> None:
    """Register ``factory`` as the channel called ``name`` (a later registration replaces it)."""
    if not name or name != name.strip().lower():
        raise ValueError(f"a channel name is lower case with no spaces, got {name!r}")
    previous = _factories.get(name)
    if previous is not None and previous is not factory:
        logger.warning("channel %s is registered again; the later registration wins", name)
    _factories[name] = factory


def _entry_points() -> dict[str, EntryPoint]:
    """The installed third-party channels, by name."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def known_channels() -> list[str]:
    """Every channel name that can be run: built-in, installed, or registered at run time; sorted."""
    return sorted({*BUILTIN_CHANNELS, *_entry_points(), *_factories})


def check_channel_names(names: list[str]) -> None:
    """Raise ``ValueError`` naming the known channels (and the nearest one) if any name is unknown."""
    known = known_channels()
    for name in names:
        if name not in known:
            raise ValueError(f"unknown channel {name!r}: the known channels are {', '.join(known)}"
                             f"{did_you_mean(name, known, repr)}")


def check_channel_type(cfg: Config) -> None:
    """Raise :class:`ConfigError` when ``channel_type`` names a channel nobody registered, in one line naming it,
    the known channels and the nearest one. Checked at start (``bootstrap/preflight.py``), by ``/config`` and
    the console before they write, and by the config watcher, rather than by the config model: the registry
    knows the channels, and the config sits below it."""
    try:
        check_channel_names(cfg.channels)
    except ValueError as exc:
        raise ConfigError(f"invalid value for 'channel_type': {exc}") from None


def channel_factory(name: str) -> ChannelFactory:
    """The factory of channel ``name``, importing its module first when it has not registered yet."""
    if name not in _factories:
        if name in BUILTIN_CHANNELS:
            importlib.import_module(BUILTIN_CHANNELS[name])
        else:
            ep = _entry_points().get(name)
            if ep is None:
                check_channel_names([name])
            loaded = ep.load()
            if name not in _factories and callable(loaded) and not inspect.ismodule(loaded):
                register(name, loaded)
    if name not in _factories:
        raise LookupError(f"channel {name!r}: its module was imported but registered no channel of that name")
    return _factories[name]


def _channel_class(factory: ChannelFactory) -> type[BaseChannel] | None:
    return factory if isinstance(factory, type) and issubclass(factory, BaseChannel) else None


def channel_problem(name: str, cfg: Config) -> str | None:
    """Why channel ``name`` cannot run with ``cfg``, in one line, or None: its module cannot be imported, its
    settings are invalid, or its own :meth:`BaseChannel.preflight` says so. Nothing is connected."""
    try:
        factory = channel_factory(name)
    except Exception as exc:  # noqa: BLE001 - a missing or broken install, whatever it raises
        what = BUILTIN_REQUIREMENTS.get(name, "its module")
        return (f"{what} cannot be imported ({type(exc).__name__}: {exc}); install it with "
                "pip install -r requirements.txt")
    cls = _channel_class(factory)
    if cls is None:
        return None
    try:
        channel_settings(name, cfg)
    except ValueError as exc:
        return str(exc)
    return cls.preflight(cfg)


def channel_settings(name: str, cfg: Config) -> Any:
    """A third-party channel's own settings: ``plugins.<name>`` in config.json, validated with the channel's
    ``Settings`` model; None for a channel without one. Raises ``ValueError`` with a one-line reason."""
    cls = _channel_class(channel_factory(name))
    if cls is None or cls.Settings is None:
        return None
    settings, error = validate_plugin_settings(name, cls, cfg.plugins.get(name, {}))
    if error:
        raise ValueError(error)
    return settings


def create_channel(name: str, **available: Any) -> Any:
    """Build channel ``name``, passing the factory those of ``available`` (see the module docstring) it names;
    ``settings`` is the channel's own (:func:`channel_settings`)."""
    factory = channel_factory(name)
    cls = _channel_class(factory)
    if cls is not None and cls.Settings is not None and "config" in available:
        available = {**available, "settings": channel_settings(name, available["config"])}
    params = inspect.signature(factory).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return factory(**available)
    return factory(**{key: value for key, value in available.items() if key in params})


def unregister(name: str) -> None:
    """Forget a channel registered at run time (tests)."""
    _factories.pop(name, None)
