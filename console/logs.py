"""The log page: the tail of ``bot.log`` with a level filter, live through a small script.

Every line shown goes through the same masking as the log itself, with the secrets in force now (and the
console's start token), so a secret written before it was masked, or by another version, is never shown.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from aiohttp import web

from console.server import console_of

logger = logging.getLogger(__name__)

#: How much of the end of bot.log the page reads at first, and at most per live update.
TAIL_BYTES = 128 * 1024
#: Records shown at most.
MAX_RECORDS = 500
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_START = re.compile(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}),\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One record of the log: its level, its time (local, as written) and its text (tracebacks included)."""

    level: str
    when: str
    text: str

    def at_least(self, level: str) -> bool:
        """True when this record's level is ``level`` or more severe."""
        return LEVELS.index(self.level) >= LEVELS.index(level) if level in LEVELS else True


def parse_records(text: str) -> list[LogRecord]:
    """Split log text into records; lines before the first record's start (a cut traceback) are left out."""
    records: list[LogRecord] = []
    level = when = ""
    lines: list[str] = []
    for line in text.splitlines():
        match = _START.match(line)
        if match:
            if lines:
                records.append(LogRecord(level, when, "\n".join(lines)))
            level, when, lines = match.group(2), match.group(1), [line]
        elif lines:
            lines.append(line)
    if lines:
        records.append(LogRecord(level, when, "\n".join(lines)))
    return records


def read_from(path: Path, offset: int | None, limit: int = TAIL_BYTES) -> tuple[str, int]:
    """The log text from ``offset`` (None: the last ``limit`` bytes) and the offset after it.

    A file shorter than ``offset`` was rotated: reading starts again at its last ``limit`` bytes. Only whole
    lines are returned, so the next read starts at a line.
    """
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, 2)
            resume = offset is not None and offset <= size  # go on where the last read stopped
            start = max(offset if resume and offset is not None else 0, size - limit, 0)
            lead = 0 if start == 0 or (resume and start == offset) else 1
            fh.seek(start - lead)
            data = fh.read(size - start + lead)
    except FileNotFoundError:
        return "", 0
    if lead:  # started inside the file: drop up to the first line break (none, when the byte before was one)
        cut = data.find(b"\n") + 1
        data = data[cut:]
        start = start - lead + cut
    end = data.rfind(b"\n") + 1
    return data[:end].decode("utf-8", errors="replace"), start + end


def recent_problems(path: Path, seconds: float, redact: Any) -> list[LogRecord]:
    """Warnings and errors of the last ``seconds``, newest last, masked."""
    text, _ = read_from(path, None)
    since = datetime.now().astimezone() - timedelta(seconds=seconds)
    out = []
    for record in parse_records(text):
        if not record.at_least("WARNING"):
            continue
        try:
            when = datetime.strptime(record.when, "%Y-%m-%d %H:%M:%S").astimezone()
        except ValueError:
            continue
        if when >= since:
            out.append(LogRecord(record.level, record.when, redact(record.text)))
    return out[-50:]


def add_routes(router: web.UrlDispatcher) -> None:
    """Register the log page and its live feed."""
    router.add_get("/logs", logs_page)
    router.add_get("/logs/tail", logs_tail)


def _level(request: web.Request) -> str:
    level = request.query.get("level", "INFO").upper()
    return level if level in LEVELS else "INFO"


def _offset(request: web.Request) -> int | None:
    raw = request.query.get("after", "")
    return int(raw) if raw.isdigit() else None


async def _records(request: web.Request, offset: int | None) -> tuple[list[LogRecord], int]:
    console = console_of(request)
    path = console.services.config().data_path() / "bot.log"
    text, end = await asyncio.to_thread(read_from, path, offset)
    level = _level(request)
    redact = console.redactor()
    records = [LogRecord(r.level, r.when, redact(r.text)) for r in parse_records(text) if r.at_least(level)]
    return records[-MAX_RECORDS:], end


async def logs_page(request: web.Request) -> web.StreamResponse:
    """The tail of bot.log at the chosen level; the script keeps it live."""
    records, end = await _records(request, None)
    return console_of(request).render(request, "logs.html", title="Logs", records=records, level=_level(request),
                                      levels=LEVELS, offset=end)


async def logs_tail(request: web.Request) -> web.StreamResponse:
    """What was written since ``after`` (a byte offset), as JSON for the live page."""
    records, end = await _records(request, _offset(request))
    return web.json_response({"offset": end, "records": [{"level": r.level, "text": r.text} for r in records]},
                             headers={"Cache-Control": "no-store"})
