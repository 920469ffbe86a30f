"""The hooks a plugin may implement, in the manner of simonw/llm's pluggy hookspecs.

A plugin is a module (or any namespace) with functions marked ``@hookimpl``. An implementation takes
any subset of a hook's arguments, by name. ``settings`` is the plugin's own validated settings (its
``Settings`` model filled from ``config.plugins["<name>"]``) and ``services`` the application's parts
(``app.Services``). Implementations may be plain functions or coroutines.

Example ``plugins/shout.py``::

    from plugins.hookspecs import hookimpl

    @hookimpl
    def after_reply(message, reply):
        return reply.upper()
"""

from __future__ import annotations

import logging

import pluggy

logger = logging.getLogger(__name__)

PROJECT = "longchat"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class _Skip:
    """The type of :data:`SKIP`."""

    _instance: _Skip | None = None

    def __new__(cls) -> _Skip:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "SKIP"


#: Returned from ``before_agent``: do not run the agent for this message (and send no reply).
SKIP = _Skip()


@hookspec
def register_commands(register, settings, services):
    """Register chat commands: ``register(name, handler, description, admin_only=False, private_only=False)``
    or ``register(Command(...))``. A handler is ``async def handler(request: CommandRequest) -> str | None``."""


@hookspec
def register_tools(register, settings, services):
    """Register tools for the model: ``register(tool_or_typed_function)``."""


@hookspec
def before_agent(message, text, settings, services):
    """Called before the agent sees a message. Return a new text, None to leave it, or SKIP to stop."""


@hookspec
def after_reply(message, reply, settings, services):
    """Called before a reply is sent. Return a new reply, or None to leave it."""


@hookspec
def memory_written(session_id, kind, text, path, settings, services):
    """Called after something is written to a session's memory, so indexers can plug in.

    ``kind`` is ``"summary"`` (a section appended to a daily file; ``path`` is that file), ``"note"`` (a note
    appended to MEMORY.md; ``path`` is that file) or ``"injected"`` (the rolling summary now injected into
    the context and kept in ``sessions.summary``; ``path`` is None). ``text`` is what was written. The
    return value is ignored; an implementation that raises is logged and skipped.
    """


@hookspec
def stopping(settings, services):
    """Called once at a graceful stop, after the last summaries ran and before the database closes: finish the
    background work that needs the database (an indexer's last passages). May be a coroutine; the stop waits for
    it a bounded time, then goes on."""
