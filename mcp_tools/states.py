"""What a server's state is, how it is restarted, and what is kept of its failures; light enough to import
before the SDK (the ``mcp`` package takes seconds to import and is loaded only when servers are configured)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from core.retry import RetryPolicy

#: Restarts after a failure: the project's backoff (1 s doubling to at most 60 s, with jitter), without end.
RESTART = RetryPolicy(attempts=None, first=1.0, cap=60.0)
#: Seconds between liveness pings of an idle server (a server that died between calls is noticed by then).
PING_INTERVAL = 10.0
#: How many of a server's last errors are kept for the console.
KEPT_ERRORS = 5

STARTING, RUNNING, RESTARTING, FAILED, DISABLED = "starting", "running", "restarting", "failed", "disabled"


@dataclass(frozen=True, slots=True)
class ServerError:
    """One failure, for the console."""

    at: datetime
    text: str
