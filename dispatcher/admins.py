"""Who is an admin (DESIGN §1.4): the terminal's user, ``admin_users`` entries, and users granted by ``/auth``.

One object owns the grants: the dispatcher asks it before running an admin-only command, and ``/auth``
records a grant through it (in the database first, so other processes see it too).
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from config.settings import atomic_write_json
from core.messages import IncomingMessage
from store.store import Store

if TYPE_CHECKING:
    from config.settings import Config

logger = logging.getLogger(__name__)

#: /auth: this many wrong passwords within FAILURE_WINDOW seconds lock the user out for LOCKOUT_SECONDS.
MAX_FAILURES = 5
FAILURE_WINDOW = 600.0
LOCKOUT_SECONDS = 600.0
#: The file under data_dir that keeps /auth failures and lockouts across restarts.
LOCKOUT_FILE = "auth_lockouts.json"


class Admins:
    """The admins of the bot; grants are loaded from the store and added by ``/auth``."""

    def __init__(self, store: Store, config: Callable[[], Config], *, shared: bool = False) -> None:
        self.store = store
        self.config = config
        #: other processes may grant admins too (several processes on one database)
        self.shared = shared
        self._grants: set[str] = set()
        #: channels whose every user is the bot's operator (:attr:`channels.base.BaseChannel.operator_only`)
        self.operator_channels: set[str] = set()
        self._guard: AuthGuard | None = None

    @property
    def guard(self) -> AuthGuard:
        """``/auth``'s lockout of wrong passwords, kept in ``data_dir`` across restarts and plugin reloads."""
        if self._guard is None:
            self._guard = AuthGuard(path=self.config().data_path() / LOCKOUT_FILE)
        return self._guard

    @property
    def grants(self) -> frozenset[str]:
        """The users granted admin through ``/auth`` (``channel:user id``), as this process knows them."""
        return frozenset(self._grants)

    async def load(self) -> None:
        """Load the admins granted through ``/auth``."""
        self._grants = await self.store.admins.all()

    def is_admin(self, msg: IncomingMessage) -> bool:
        """Admins: the operator's channels (the terminal), ``admin_users`` entries, and ``/auth`` grants."""
        if msg.channel in self.operator_channels or msg.extra.get("operator") is True:
            return True  # the terminal, or a channel's own operator (the console's web chat page)
        key = f"{msg.channel}:{msg.user_id}"
        return key in self.config().admin_users or key in self._grants

    async def is_admin_now(self, msg: IncomingMessage) -> bool:
        """:meth:`is_admin`; with other processes, a user not known as admin here is looked up again (an
        ``/auth`` answered by another process granted it in the database)."""
        if not self.is_admin(msg) and self.shared:
            await self.load()
        return self.is_admin(msg)

    async def grant(self, user_key: str) -> None:
        """Make ``user_key`` (``channel:user id``) an admin, stored first."""
        await self.store.admins.grant(user_key)
        self._grants.add(user_key)


class AuthGuard:
    """Counts wrong passwords per user: after 5 within 10 minutes, that user is locked out for 10 minutes.

    With a ``path``, failures and lockouts are kept in a small JSON file (owner-only), so a restart does
    not reset them: a lockout that a restart lifts only slows guessing down by a restart. A file beside
    the database rather than a table: the state is a few lines, only /auth reads it, and it needs no
    migration (processes sharing one PostgreSQL each keep their own, a looser but still bounded limit).
    """

    def __init__(self, clock: Callable[[], float] = time.time, path: Path | None = None) -> None:
        self.clock = clock
        self.path = path
        self._failures: dict[str, deque[float]] = {}
        self._locked_until: dict[str, float] = {}
        self._load()

    def locked_for(self, user_key: str) -> float:
        """Seconds the user is still locked out (0 when not)."""
        until = self._locked_until.get(user_key)
        if until is None:
            return 0.0
        left = until - self.clock()
        if left <= 0:
            del self._locked_until[user_key]
            self._save()
            return 0.0
        return left

    def fail(self, user_key: str) -> bool:
        """Count a wrong password; True when this locks the user out."""
        now = self.clock()
        failures = self._failures.setdefault(user_key, deque())
        failures.append(now)
        while failures and failures[0] <= now - FAILURE_WINDOW:
            failures.popleft()
        locked = len(failures) >= MAX_FAILURES
        if locked:
            self._locked_until[user_key] = now + LOCKOUT_SECONDS
            del self._failures[user_key]
        self._save()
        return locked

    def succeed(self, user_key: str) -> None:
        """Forget the user's failures."""
        if self._failures.pop(user_key, None) is not None:
            self._save()

    def _load(self) -> None:
        if self.path is None:
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            now = self.clock()
            self._locked_until = {str(k): float(v) for k, v in data.get("locked_until", {}).items() if v > now}
            self._failures = {str(k): deque(float(t) for t in v if t > now - FAILURE_WINDOW)
                              for k, v in data.get("failures", {}).items()}
        except FileNotFoundError:
            return
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            logger.warning("/auth: cannot read %s (%s); starting with no lockouts", self.path, exc)

    def _save(self) -> None:
        if self.path is None:
            return
        data = {"locked_until": self._locked_until,
                "failures": {k: list(v) for k, v in self._failures.items() if v}}
        try:
            atomic_write_json(self.path, data)  # mkstemp: created owner-only
        except OSError as exc:
            logger.warning("/auth: cannot save lockouts to %s: %s", self.path, exc.strerror or exc)
