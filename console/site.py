"""The web console put together: every page module, and its start (the app's entry to the console).

The page modules import ``console/server.py`` for the console that serves them, so the server does not import
them: this module does, and hands their routes to the :class:`~console.server.WebConsole` it makes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from channels.web.channel import WebChannel
from console import (
    chat_page,
    config_page,
    conversations,
    knowledge_page,
    logs,
    memory_page,
    pages,
    tools_page,
    usage_page,
)
from console.server import WebConsole

if TYPE_CHECKING:
    from channels.base import BaseChannel
    from dispatcher.commands import Services
    from dispatcher.leader import Leadership

logger = logging.getLogger("console.server")  # its lines read as the server's, as before this module
#: every page module's routes, in the order they are added
PAGES = tuple(m.add_routes for m in (pages, conversations, memory_page, config_page, logs, usage_page,
                                                tools_page, chat_page, knowledge_page))


def web_console(services: Services, channel_failures: dict[str, str] | None = None, *,
                channels: list[BaseChannel] | None = None, leadership: Leadership | None = None) -> WebConsole:
    """The console of ``services`` with every page (not started)."""
    console = WebConsole(services, channel_failures, channels=channels, leadership=leadership, pages=PAGES)
    console.public_paths.append(chat_page.public_path)
    return console


async def start_console(services: Services, channel_failures: dict[str, str] | None = None, *,
                        channels: list[BaseChannel] | None = None,
                        leadership: Leadership | None = None) -> WebConsole | None:
    """Start the console of ``services``' settings; None when it is off or could not start."""
    console = web_console(services, channel_failures, channels=channels, leadership=leadership)
    try:
        started = await console.start()
    except Exception:  # noqa: BLE001 - the console must never stop the chat channels
        logger.exception("web console: failed to start")
        started = False
    if not started:
        for channel in channels or ():
            if isinstance(channel, WebChannel):  # its pages are the console's: it cannot run either
                channel.console_failed(console.refusal() or "see the line above in bot.log")
        return None
    return console
