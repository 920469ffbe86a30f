"""The ``current_time`` tool."""

from __future__ import annotations

from datetime import datetime

from agent.tools.base import ToolContext, tool


@tool
def current_time(ctx: ToolContext) -> str:
    """Return the current date and time in the bot's configured time zone."""
    now = datetime.now(ctx.config.zone())
    return now.strftime("%Y-%m-%d %H:%M:%S %Z (%A)").strip()
