"""Plugin discovery, settings, registration and the message hooks, on pluggy.

Plugins are the built-ins in ``plugins/builtin/`` (:data:`BUILTIN_PLUGINS`), every module or package
directly under ``plugins/``, and installed Python packages with an entry point in the ``longchat`` group
(:data:`ENTRY_POINT_GROUP`), as simonw/llm's plugins are found. A plugin's name is its module name (for an
installed package, its entry point's name); its settings come from
``config.plugins["<name>"]``, validated by its ``Settings`` model (or just ``{"enabled": bool}``).
A plugin with invalid settings is reported in one line and disabled; ``{"enabled": false}`` turns one off.

Every load starts from a fresh pluggy manager, and the commands and tools a previous load registered
are removed first, so a reload never registers anything twice (DESIGN §9 item 13). Every call into a
plugin is isolated: an exception is logged with its traceback and that plugin is skipped. That is why
installed packages are loaded one entry point at a time rather than with pluggy's
``load_setuptools_entrypoints``, which stops at the first package that fails to import and registers
each plugin before its settings are checked.

Tools a plugin registers get the application's services in their :class:`~agent.tools.base.ToolContext`.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import pkgutil
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy

from agent.tools.base import Tool, bind_services
from channels.registry import channel_settings, known_channels
from config.plugin_settings import validate_plugin_settings
from core.messages import IncomingMessage
from core.suggest import did_you_mean
from dispatcher.commands import Command, CommandRequest, Services
from plugins import hookspecs
from plugins.hookspecs import PROJECT, SKIP

logger = logging.getLogger(__name__)

PLUGINS_DIR = Path(__file__).resolve().parent
#: The entry-point group installed plugins register in (``[project.entry-points.longchat]``).
ENTRY_POINT_GROUP = PROJECT
#: The built-in plugins, in load order (modules of ``plugins.builtin``).
BUILTIN_PLUGINS = ("commands", "admin", "tools", "memory_index", "memory_commands", "person", "export",
                   "usage", "reminders", "mcp_tools", "knowledge")
#: Names under ``plugins/`` that are not plugins.
RESERVED_NAMES = frozenset({"manager", "hookspecs", "builtin", "__init__", "__main__"})
COMMAND_FAILED_REPLY = "Sorry, /{command} failed. The error has been logged."


@dataclass
class PluginInfo:
    """One discovered plugin and what it registered."""

    name: str
    module: Any
    builtin: bool
    enabled: bool = False
    settings: Any = None
    error: str | None = None
    commands: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


class PluginManager:
    """Finds plugins, registers their commands and tools, and runs their message hooks.

    It implements the dispatcher's ``MessageHooks``: the app hands it to the dispatcher it makes.
    """

    def __init__(self, services: Services, *, directory: Path | None = PLUGINS_DIR,
                 builtins: Iterable[str] = BUILTIN_PLUGINS, extra: Iterable[Any] = (),
                 entry_point_group: str | None = ENTRY_POINT_GROUP) -> None:
        self.services = services
        self.directory = directory
        self.entry_point_group = entry_point_group
        self.builtins = tuple(builtins)
        self.extra = list(extra)
        self.plugins: dict[str, PluginInfo] = {}
        self._pm = self._new_pm()
        #: per hook, its implementations in call order; plugins change only in load(), which empties it
        self._impl_cache: dict[str, list[Any]] = {}
        self._modules: dict[str, ModuleType | None] = {}
        self._commands: dict[str, str] = {}  # command name -> plugin that registered it
        self._tools: dict[str, str] = {}  # tool name -> plugin
        services.config.on_change(self._config_changed)

    # --- discovery -----------------------------------------------------------------------
    @staticmethod
    def _new_pm() -> pluggy.PluginManager:
        pm = pluggy.PluginManager(PROJECT)
        pm.add_hookspecs(hookspecs)
        return pm

    def _import(self, key: str, importer: Callable[[], ModuleType]) -> ModuleType | None:
        """Import once; a module that fails to import is logged and skipped (and not retried)."""
        if key not in self._modules:
            try:
                self._modules[key] = importer()
            except Exception:  # noqa: BLE001 - a broken plugin must not stop the bot
                logger.exception("plugin %s failed to import; skipped", key)
                self._modules[key] = None
        return self._modules[key]

    def _candidates(self) -> list[tuple[str, Any, bool]]:
        """``(name, module, builtin)`` of every plugin: built-ins, ``plugins/``, installed packages, extras."""
        found: list[tuple[str, Any, bool]] = []
        for name in self.builtins:
            module = self._import(f"builtin.{name}", lambda n=name: importlib.import_module(f"plugins.builtin.{n}"))
            if module is not None:
                found.append((name, module, True))
        if self.directory is not None and self.directory.is_dir():
            for info in sorted(pkgutil.iter_modules([str(self.directory)]), key=lambda i: i.name):
                if info.name in RESERVED_NAMES or info.name.startswith(("_", "test")):
                    continue
                module = self._import(info.name, lambda n=info.name, p=info.ispkg: self._load_external(n, p))
                if module is not None:
                    found.append((info.name, module, False))
        if self.entry_point_group:
            for ep in sorted(entry_points(group=self.entry_point_group), key=lambda e: e.name):
                module = self._import(f"entry point {ep.name} ({ep.value})", ep.load)
                if module is not None:
                    found.append((ep.name, module, False))
        for obj in self.extra:
            if isinstance(obj, ModuleType):
                name = obj.__name__.rsplit(".", 1)[-1]
            else:
                name = getattr(obj, "name", None) or type(obj).__name__.lower()
            found.append((name, obj, False))
        return found

    def _load_external(self, name: str, is_package: bool) -> ModuleType:
        assert self.directory is not None
        if self.directory.resolve() == PLUGINS_DIR:
            return importlib.import_module(f"plugins.{name}")
        qualified = f"longchat_plugins.{name}"
        path = self.directory / name / "__init__.py" if is_package else self.directory / f"{name}.py"
        spec = importlib.util.spec_from_file_location(
            qualified, path, submodule_search_locations=[str(path.parent)] if is_package else None)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load plugin {name} from {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[qualified] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(qualified, None)
            raise
        return module

    # --- loading -------------------------------------------------------------------------
    def load(self) -> None:
        """Register every enabled plugin, its commands and its tools (replacing any earlier load)."""
        self._unregister_all()
        pm = self._new_pm()
        config = self.services.config()
        wanted: dict[str, Any] = dict(config.plugins)
        plugins: dict[str, PluginInfo] = {}
        for name, module, builtin in self._candidates():
            if name in plugins:
                logger.error("plugin %s is defined twice; the second one is skipped", name)
                continue
            info = plugins[name] = PluginInfo(name=name, module=module, builtin=builtin)
            info.settings, info.error = validate_plugin_settings(name, module, wanted.get(name, {}))
            if info.error is not None:
                logger.error("plugin %s disabled: %s", name, info.error)
                continue
            if not info.settings.enabled:
                logger.info("plugin %s is turned off in config", name)
                continue
            try:
                pm.register(module, name=name)
            except Exception as exc:  # noqa: BLE001 - e.g. a hook with unknown arguments
                info.error = f"cannot register: {exc}"
                logger.error("plugin %s disabled: %s", name, info.error)
                continue
            info.enabled = True
        for name in wanted:
            if name not in plugins and name not in known_channels():  # a channel's own settings (registry)
                logger.warning("config.plugins names an unknown plugin %r%s", name, did_you_mean(name, plugins))
        self._pm, self.plugins = pm, plugins
        self._impl_cache = {}
        self._call_register("register_commands", self._command_register)
        self._call_register("register_tools", self._tool_register)
        logger.info("plugins loaded: %s", ", ".join(n for n, i in plugins.items() if i.enabled) or "none")

    reload = load

    def _config_changed(self, old: Any, new: Any) -> None:
        if old.plugins != new.plugins:
            logger.info("plugin settings changed; reloading plugins")
            self.reload()

    def check_settings(self, plugins: dict[str, Any]) -> str | None:
        """The first problem with a ``plugins`` setting (for /config before it writes), or None."""
        known = {name: module for name, module, _ in self._candidates()}
        for name, raw in plugins.items():
            if name not in known and name in known_channels():
                try:
                    channel_settings(name, self.services.config.current.model_copy(update={"plugins": {name: raw}}))
                except ValueError as exc:
                    return str(exc)
                continue
            if name not in known:
                return f"unknown plugin {name!r}{did_you_mean(name, known)}"
            _settings, error = validate_plugin_settings(name, known[name], raw)
            if error:
                return error
        return None

    def _unregister_all(self) -> None:
        commands, tools = self.services.commands, self.services.tools
        for name in self._commands:
            commands.unregister(name)
        for name in self._tools:
            tools.unregister(name)
        self._commands.clear()
        self._tools.clear()
        for info in self.plugins.values():
            info.commands.clear()
            info.tools.clear()

    def _impls(self, hook: str) -> list[Any]:
        """The hook's implementations: tryfirst ones, then in load order (built-ins first), then trylast ones.

        Asked twice a message (before_agent, after_reply), so the order is worked out once per load.
        """
        impls = self._impl_cache.get(hook)
        if impls is None:
            order = {name: i for i, name in enumerate(self.plugins)}
            impls = sorted(getattr(self._pm.hook, hook).get_hookimpls(),
                           key=lambda im: (0 if im.tryfirst else 2 if im.trylast else 1,
                                           order.get(im.plugin_name, len(order))))
            self._impl_cache[hook] = impls
        return impls

    def _kwargs(self, impl: Any, **values: Any) -> dict[str, Any]:
        info = self.plugins.get(impl.plugin_name)
        values.update(settings=info.settings if info else None, services=self.services)
        return {k: values[k] for k in impl.argnames if k in values}

    def _call_register(self, hook: str, make_register: Callable[[PluginInfo], Callable[..., Any]]) -> None:
        for impl in self._impls(hook):
            info = self.plugins[impl.plugin_name]
            try:
                result = impl.function(**self._kwargs(impl, register=make_register(info)))
                if inspect.iscoroutine(result):
                    result.close()
                    raise TypeError(f"{hook} must be a plain function, not a coroutine")
            except Exception:  # noqa: BLE001 - isolate the plugin
                logger.exception("plugin %s: %s failed; skipped", info.name, hook)

    def _command_register(self, info: PluginInfo) -> Callable[..., Command]:
        def register(command: Command | str, handler: Callable[..., Any] | None = None, description: str = "",
                     *, admin_only: bool = False, private_only: bool = False) -> Command:
            if not isinstance(command, Command):
                if handler is None:
                    raise TypeError("register(name, handler, description) needs a handler")
                command = Command(name=command, description=description, handler=handler,
                                  admin_only=admin_only, private_only=private_only)
            name = command.name.lstrip("/").lower()
            guarded = Command(name=name, description=command.description,
                              handler=self._guard(info.name, name, command.handler),
                              admin_only=command.admin_only, private_only=command.private_only)
            owner = self._commands.get(name)
            if owner is not None and owner != info.name:
                logger.warning("command /%s of plugin %s is replaced by plugin %s", name, owner, info.name)
            self.services.commands.register(guarded)
            self._commands[name] = info.name
            info.commands.append(name)
            return guarded
        return register

    def _tool_register(self, info: PluginInfo) -> Callable[..., Any]:
        def register(tool: Any) -> Any:
            registered = tool if isinstance(tool, Tool) else Tool.from_function(tool)
            registered = self.services.tools.register(bind_services(registered, self.services))
            owner = self._tools.get(registered.name)
            if owner is not None and owner != info.name:
                logger.warning("tool %s of plugin %s is replaced by plugin %s", registered.name, owner, info.name)
            self._tools[registered.name] = info.name
            info.tools.append(registered.name)
            return registered
        return register

    @staticmethod
    def _guard(plugin: str, name: str, handler: Callable[[CommandRequest], Any]) -> Callable[..., Any]:
        async def guarded(request: CommandRequest) -> str | None:
            try:
                return await _maybe_await(handler(request))
            except Exception:  # noqa: BLE001 - a failing command gets a short sentence, the chat goes on
                logger.exception("plugin %s: /%s failed", plugin, name)
                return COMMAND_FAILED_REPLY.format(command=name)
        return guarded

    # --- message hooks (the dispatcher's MessageHooks) -----------------------------------
    async def before_agent(self, msg: IncomingMessage, text: str) -> str | None:
        """Run every plugin's ``before_agent`` in turn; None means skip the agent."""
        for impl in self._impls("before_agent"):
            try:
                result = await _maybe_await(impl.function(**self._kwargs(impl, message=msg, text=text)))
            except Exception:  # noqa: BLE001 - isolate the plugin
                logger.exception("plugin %s: before_agent failed; skipped", impl.plugin_name)
                continue
            if result is SKIP:
                logger.info("plugin %s: the agent is skipped for this message", impl.plugin_name)
                return None
            if isinstance(result, str):
                text = result
        return text

    async def after_reply(self, msg: IncomingMessage, reply: str) -> str:
        """Run every plugin's ``after_reply`` in turn and return the reply to send."""
        for impl in self._impls("after_reply"):
            try:
                result = await _maybe_await(impl.function(**self._kwargs(impl, message=msg, reply=reply)))
            except Exception:  # noqa: BLE001 - isolate the plugin
                logger.exception("plugin %s: after_reply failed; skipped", impl.plugin_name)
                continue
            if isinstance(result, str):
                reply = result
        return reply

    async def memory_written(self, session_id: str, kind: str, text: str, path: Path | None) -> None:
        """Run every plugin's ``memory_written``; one that raises is logged and skipped."""
        for impl in self._impls("memory_written"):
            try:
                await _maybe_await(impl.function(**self._kwargs(impl, session_id=session_id, kind=kind,
                                                                text=text, path=path)))
            except Exception:  # noqa: BLE001 - isolate the plugin
                logger.exception("plugin %s: memory_written failed; skipped", impl.plugin_name)

    async def stopping(self) -> None:
        """Run every plugin's ``stopping`` (at a graceful stop, before the database closes); one that raises is
        logged and skipped."""
        for impl in self._impls("stopping"):
            try:
                await _maybe_await(impl.function(**self._kwargs(impl)))
            except Exception:  # noqa: BLE001 - isolate the plugin
                logger.exception("plugin %s: stopping failed; skipped", impl.plugin_name)


def install(services: Services, **kwargs: Any) -> PluginManager:
    """Create the plugin manager and load the plugins. The caller hands it to the dispatcher as its message
    hooks, and subscribes its ``memory_written`` to what is written to memory."""
    manager = PluginManager(services, **kwargs)
    services.plugins = manager
    manager.load()
    return manager
