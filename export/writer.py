"""Writes an export: one zip holding ``export.json``, ``export.md`` and the memory files as they are.

The zip is written to a temporary file in ``<data_dir>/exports/`` (owner-only) and renamed when complete,
so a crash never leaves a half file under the final name. ``export.json`` is written into the zip as it
is produced, a part at a time and a long history a page at a time; ``export.md`` goes to a temporary file
beside it meanwhile and is copied in at the end. Nothing long is held in memory.

``export.json``: ``{"format": "longchat-export", "version": 1, "exported_at", "session", "person",
"parts": {<part name>: <its JSON>, ...}, "failed": {<part name>: <error>}}``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import zipfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from core.files import replacing
from export.parts import ExportPart, ExportRequest, Section, dumps, file_stem

logger = logging.getLogger(__name__)

FORMAT = "longchat-export"
VERSION = 1


@dataclass
class ExportFile:
    """A finished export: its path, size, and what each part held, for the reply."""

    path: Path
    size: int = 0
    summaries: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


class _Zip:
    """The zip being written; every call blocks, so each runs in a worker thread."""

    def __init__(self, path: Path) -> None:
        self.zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True)
        self.json: IO[bytes] = self.zip.open("export.json", "w", force_zip64=True)

    def write_json(self, text: str) -> None:
        self.json.write(text.encode("utf-8"))

    def finish(self, markdown: Path, files: list[tuple[str, Path]]) -> None:
        self.json.close()
        self.zip.write(markdown, "export.md")
        seen: set[str] = set()
        for name, path in files:
            if name in seen or path.is_symlink() or not path.is_file():
                continue
            seen.add(name)
            self.zip.write(path, name)
        self.zip.close()

    def abort(self) -> None:
        try:
            self.json.close()
        finally:
            self.zip.close()


async def write_export(request: ExportRequest, parts: list[ExportPart], folder: Path,
                       now: datetime | None = None) -> ExportFile:
    """Write the export of ``request`` with ``parts`` into ``folder``; return the finished file."""
    now = now or datetime.now(UTC)
    await asyncio.to_thread(folder.mkdir, mode=0o700, parents=True, exist_ok=True)
    final = await asyncio.to_thread(_free_name, folder, file_stem(request.session.session_id, now))
    md_fd, md_name = tempfile.mkstemp(prefix=".export.", suffix=".md.part", dir=folder)  # owner-only
    md_path = Path(md_name)
    result = ExportFile(path=final)
    archive: _Zip | None = None
    try:
        with replacing(final, suffix=".zip.part") as tmp:  # renamed to ``final`` once the zip is complete
            try:
                with os.fdopen(md_fd, "w", encoding="utf-8", newline="\n") as md:
                    archive = await asyncio.to_thread(_Zip, tmp)
                    files = await _write_parts(request, parts, archive, md, now, result)
                await asyncio.to_thread(archive.finish, md_path, files)
                archive = None
            except BaseException:
                if archive is not None:
                    await asyncio.to_thread(archive.abort)
                raise
    finally:
        await asyncio.to_thread(_remove, md_path)
    result.size = (await asyncio.to_thread(os.stat, final)).st_size
    logger.info("session %s: exported to %s (%d bytes)", request.session.session_id, final.name, result.size)
    return result


def _free_name(folder: Path, stem: str) -> Path:
    """``<stem>.zip`` in ``folder``, or ``<stem>-2.zip`` … when taken (two exports within one second)."""
    path, n = folder / f"{stem}.zip", 1
    while path.exists():
        n += 1
        path = folder / f"{stem}-{n}.zip"
    return path


def _remove(path: Path) -> None:
    path.unlink(missing_ok=True)


async def _write_parts(request: ExportRequest, parts: list[ExportPart], archive: _Zip, md: IO[str],
                       now: datetime, result: ExportFile) -> list[tuple[str, Path]]:
    info = request.session
    head = {"format": FORMAT, "version": VERSION, "exported_at": now.isoformat(),
            "session": {"session_id": info.session_id, "channel": info.channel, "chat_id": info.chat_id,
                        "is_group": info.is_group, "title": info.title},
            "person": request.person}
    await asyncio.to_thread(archive.write_json, dumps(head)[:-1] + ', "parts": {')
    md.write(f"# Export of {info.session_id}\n\nExported {now.astimezone(request.zone):%Y-%m-%d %H:%M %Z}. "
             "`export.json` in this file holds the same, complete, for programs.\n")
    files: list[tuple[str, Path]] = []
    failed: dict[str, str] = {}
    first = True
    for part in parts:
        md.write(f"\n## {part.title}\n\n")
        try:
            section = await part.collect(request)
        except Exception as exc:  # noqa: BLE001 - one part failing must not lose the others
            logger.exception("session %s: export part %s failed", info.session_id, part.name)
            failed[part.name] = f"{type(exc).__name__}: {exc}"
            result.failed.append(part.name)
            md.write(f"(This part could not be exported: {type(exc).__name__}.)\n")
            continue
        prefix = ("" if first else ", ") + dumps(part.name) + ": "
        first = False
        if section.pages is not None:  # a failure midway fails the whole export: half a list is no export
            count = await _write_pages(section, archive, md, prefix)
            result.summaries.append(f"{count:,} {section.summary}".strip())
        else:
            await asyncio.to_thread(archive.write_json, prefix + dumps(section.data))
            md.write(section.markdown.rstrip() + "\n")
            if section.summary:
                result.summaries.append(section.summary)
        files.extend(section.files)
    await asyncio.to_thread(archive.write_json, '}, "failed": ' + dumps(failed) + "}")
    return files


async def _write_pages(section: Section, archive: _Zip, md: IO[str], prefix: str) -> int:
    """Stream a part's pages: a JSON list into the zip, Markdown into ``md``, each page encoded and written in a
    worker thread; return how many rows."""
    assert section.pages is not None and section.row is not None
    row = section.row
    count = 0

    def write(page: list[Any], first: bool) -> None:
        items, texts = [], []
        for record in page:
            item, text = row(record)
            items.append(dumps(item))
            texts.append(text)
        archive.write_json(("" if first else ", ") + ", ".join(items))
        md.write("".join(texts))

    await asyncio.to_thread(archive.write_json, prefix + "[")
    async for page in section.pages():
        if page:
            await asyncio.to_thread(write, page, count == 0)
            count += len(page)
    await asyncio.to_thread(archive.write_json, "]")
    if not count:
        md.write("Nothing is stored.\n")
    return count


def describe(export: ExportFile) -> str:
    """One line of what an export holds."""
    held = ", ".join(export.summaries) or "nothing stored"
    failed = f"; could not export: {', '.join(export.failed)} (see the log)" if export.failed else ""
    return f"{held}{failed}"


