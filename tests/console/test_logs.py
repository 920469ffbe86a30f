"""console/logs.py: reading the end of bot.log as records, from an offset, across a rotation."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from console.logs import LogRecord, parse_records, read_from, recent_problems

LINES = [
    "2026-11-26 10:00:00,001 INFO app: ready: telegram",
    "2026-11-26 10:00:01,002 ERROR app: it broke",
    "Traceback (most recent call last):",
    '  File "x.py", line 1, in <module>',
    "ValueError: nope",
    "2026-11-26 10:00:02,003 WARNING dispatcher.dispatcher: slow",
]


def test_records_keep_their_traceback_lines_and_levels() -> None:
    records = parse_records("tail of a cut traceback\n" + "\n".join(LINES) + "\n")
    assert [r.level for r in records] == ["INFO", "ERROR", "WARNING"]
    assert records[1].text == "\n".join(LINES[1:5])
    assert records[1].when == "2026-11-26 10:00:01"
    assert [r.level for r in records if r.at_least("WARNING")] == ["ERROR", "WARNING"]
    assert LogRecord("DEBUG", "", "x").at_least("INFO") is False


def test_reading_from_an_offset_returns_whole_lines_only(tmp_path: Path) -> None:
    log = tmp_path / "bot.log"
    log.write_text(LINES[0] + "\n" + LINES[1][:20], encoding="utf-8")  # the second line is being written
    text, offset = read_from(log, 0)
    assert text == LINES[0] + "\n" and offset == len(LINES[0]) + 1
    with log.open("a", encoding="utf-8") as fh:
        fh.write(LINES[1][20:] + "\n")
    text, offset2 = read_from(log, offset)
    assert text == LINES[1] + "\n" and offset2 == log.stat().st_size
    assert read_from(log, offset2) == ("", offset2)


def test_a_rotated_log_is_read_again_from_its_start_and_a_long_one_from_its_end(tmp_path: Path) -> None:
    log = tmp_path / "bot.log"
    log.write_text(LINES[0] + "\n", encoding="utf-8")
    text, _ = read_from(log, 10_000)  # an offset past the end: the file was rotated
    assert text == LINES[0] + "\n"
    log.write_text("".join(f"{LINES[0]} {n}\n" for n in range(1000)), encoding="utf-8")
    text, offset = read_from(log, None, limit=500)
    assert offset == log.stat().st_size and len(text) <= 500
    assert text.splitlines()[0].startswith("2026-11-26 10:00:00,001 INFO")  # no partial first line
    assert text.splitlines()[-1].endswith(" 999")
    assert read_from(tmp_path / "missing.log", None) == ("", 0)


def test_recent_problems_are_the_last_hours_warnings_and_errors_masked(tmp_path: Path) -> None:
    now = datetime.now().astimezone()
    old = (now - timedelta(hours=2)).strftime("%Y-%m-%d %H:%M:%S")
    new = (now - timedelta(minutes=5)).strftime("%Y-%m-%d %H:%M:%S")
    log = tmp_path / "bot.log"
    log.write_text(f"{old},000 ERROR app: long ago\n{new},000 INFO app: fine\n"
                   f"{new},000 WARNING app: key sk-abc in a line\n", encoding="utf-8")
    problems = recent_problems(log, 3600, lambda text: text.replace("sk-abc", "[secret]"))
    assert [(p.level, p.text.split(": ", 1)[1]) for p in problems] == [("WARNING", "key [secret] in a line")]
