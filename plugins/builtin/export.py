"""Built-in plugin: ``/export`` (DESIGN §1.4): everything stored for this conversation as one zip file.

The zip holds ``export.json`` (complete, for programs), ``export.md`` (the same, readable) and the memory
files as they are (:mod:`export.writer`). On a channel that sends files (Telegram) it goes as a document and
the copy on disk is deleted; elsewhere (the terminal, WeChat) it stays under ``<data_dir>/exports/``
(owner-only) and the answer gives its path. In a shared group session only admins may export; the speaker's
person notes go in only in their private chat (a group's export is posted to the group).

:data:`PARTS` is the registry of sections: a feature adds its own with ``PARTS.register(ExportPart(...))``.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from core.records import is_shared_group
from dispatcher.commands import CommandRequest
from export.parts import ExportRequest, default_parts
from export.writer import ExportFile, describe, write_export
from plugins.builtin.commands import SHARED_GROUP_REPLY
from plugins.hookspecs import hookimpl

logger = logging.getLogger(__name__)

#: The sections of every export, in order (export/parts.py; a feature may register its own).
PARTS = default_parts()
EXPORTS_DIR = "exports"
EXPORT_USAGE = "Usage: /export sends everything stored for this conversation as one file."
FAILED_REPLY = "Sorry, the export could not be written. The error has been logged; please try again later."


@hookimpl
def register_commands(register) -> None:
    """Register /export."""
    register("export", export_command, "everything stored for this conversation (and your notes) as one file")


def size_text(n: int) -> str:
    """``"812 bytes"``, ``"12.3 KB"``, ``"50.0 MB"``."""
    if n < 1000:
        return f"{n} bytes"
    return f"{n / 1000:,.1f} KB" if n < 1_000_000 else f"{n / 1_000_000:,.1f} MB"


def _remove(path: Path) -> None:
    path.unlink(missing_ok=True)


async def export_command(request: CommandRequest) -> str:
    """Write the export; send it as a document where the channel can, else answer with its path."""
    if request.command.args.strip():
        return EXPORT_USAGE
    if is_shared_group(request.session) and not request.is_admin:
        return SHARED_GROUP_REPLY.format(what="export")
    services = request.services
    cfg = services.config()
    private = not request.message.is_group
    export_request = ExportRequest(session=request.session, person=request.user_key if private else None,
                                   services=services, zone=cfg.zone())
    try:
        export = await write_export(export_request, PARTS.all(), cfg.data_path() / EXPORTS_DIR)
    except Exception:  # noqa: BLE001 - the user gets a sentence; nothing stored is changed
        logger.exception("session %s: export failed", request.session_id)
        return FAILED_REPLY
    held = describe(export)
    channel = request.channel
    if channel is None or not channel.max_file_bytes:
        return f"Exported ({held}) to {export.path} ({size_text(export.size)})."
    if export.size > channel.max_file_bytes:
        logger.warning("session %s: export of %d bytes is over the channel's %d-byte file limit; kept at %s",
                       request.session_id, export.size, channel.max_file_bytes, export.path)
        return (f"The export is {size_text(export.size)}, more than the {size_text(channel.max_file_bytes)} I can send "
                f"here. It is saved on the bot's computer as {export.path}; ask the bot's operator for it.")
    return await _send(request, export, held)


async def _send(request: CommandRequest, export: ExportFile, held: str) -> str:
    channel = request.channel
    assert channel is not None
    try:
        await channel.send_file(request.message, export.path, filename=export.path.name,
                                caption=f"Export of this conversation: {held}."[:1024])
    except Exception:  # noqa: BLE001 - the file stays on disk; the user is told
        logger.exception("session %s: sending the export failed; kept at %s", request.session_id, export.path)
        return (f"Sorry, the export could not be sent. It is saved on the bot's computer as {export.path}; "
                "please try again later or ask the bot's operator for it.")
    await asyncio.to_thread(_remove, export.path)
    return f"Here is the export of this conversation ({held})."
