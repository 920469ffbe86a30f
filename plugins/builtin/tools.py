"""Built-in plugin: the agent's tools (DESIGN §1.8), registered through the same hook as any plugin's."""

from __future__ import annotations

import importlib
import logging

from agent.tools.current_time import current_time
from plugins.hookspecs import hookimpl

logger = logging.getLogger(__name__)

#: Built-in tools that live in their own modules: (module, attribute holding a tool or a list of tools).
OPTIONAL_TOOLS = (
    ("agent.tools.memory_tools", "MEMORY_TOOLS"),
    ("agent.tools.web_fetch", "web_fetch"),
)


@hookimpl
def register_tools(register) -> None:
    """Register current_time, memory_search, memory_get and web_fetch (those that are installed)."""
    register(current_time)
    for module_name, attr in OPTIONAL_TOOLS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            logger.debug("built-in tool module %s is not available", module_name)
            continue
        found = getattr(module, attr)
        for tool in found if isinstance(found, list | tuple) else [found]:
            register(tool)
