"""``python -m store.migrations``: bring the database whose URL is read from stdin to head, in this process.

The bot runs it as a child process at start when the schema is not at head (``migrate_in_child``), so that
Alembic's import cost stays out of the long-running process. It prints ``{"before": ..., "head": ...}`` as its
last line on stdout; on a failure, its reason is the last line on stderr and the exit status is 1.
"""

from __future__ import annotations

import asyncio
import json
import sys


async def _migrate(url: str) -> tuple[str | None, str]:
    from store.engine import open_database
    from store.migrations import upgrade_to_head

    database = open_database(url)
    try:
        return await database.run(upgrade_to_head)
    finally:
        await database.close()


def main() -> int:
    """Migrate the database named on stdin; print the outcome as JSON."""
    url = sys.stdin.read().strip()
    try:
        before, head = asyncio.run(_migrate(url))
    except Exception as exc:  # noqa: BLE001 - the parent shows the reason; the traceback is for a developer
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        sys.stderr.write((reason[0] if reason else type(exc).__name__) + "\n")
        return 1
    sys.stdout.write(json.dumps({"before": before, "head": head}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
