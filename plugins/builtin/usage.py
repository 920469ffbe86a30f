"""Built-in plugin: ``/usage`` (DESIGN §1.4, §12): this chat's and your tokens today and this month, per model,
against the daily caps."""

from __future__ import annotations

from dispatcher.commands import CommandRequest
from plugins.hookspecs import hookimpl
from usage.report import usage_text

NOT_RECORDED = "Usage is not recorded in this setup."


@hookimpl
def register_commands(register) -> None:
    """Register /usage."""
    register("usage", usage_command, "tokens used today and this month by this chat and by you, against the caps")


async def usage_command(request: CommandRequest) -> str:
    """The figures of this chat and of the speaker."""
    usage = request.services.usage
    if usage is None:
        return NOT_RECORDED
    return await usage_text(usage, request.services.config(), request.session, request.message.channel,
                            request.message.user_id, is_admin=request.is_admin)
