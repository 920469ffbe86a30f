"""Who may use the console: the start token or the password, session cookies, CSRF tokens and the lockout.

On loopback without ``web_console_password`` a one-time token made at start (printed in the start banner and
``bot.log``, as Jupyter does) opens the console; with the password, a login form. The token logs in one
browser once; ``/console`` (the terminal, or an admin's private chat) makes a new one, which replaces any
unused one. A successful login gets a new session id in an HttpOnly, SameSite=Strict cookie; every form
carries the session's CSRF token, and a POST without it is refused. Five failed logins from one address
within 10 minutes lock that address out for 10 minutes (the ``/auth`` guard, kept in its own file under the
data folder).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dispatcher.admins import AuthGuard

if TYPE_CHECKING:
    from config.settings import Config

logger = logging.getLogger(__name__)

COOKIE = "console_session"
#: The cookie of a visitor not logged in: the login form's CSRF token (never the session cookie).
LOGIN_COOKIE = "console_login"
#: A session unused this long must log in again.
SESSION_IDLE_SECONDS = 12 * 3600
#: Sessions kept at most (the oldest go first): visitors who never log in cannot fill the memory.
MAX_SESSIONS = 1000
#: The file under data_dir that keeps the console's failed logins and lockouts across restarts.
LOCKOUT_FILE = "console_lockouts.json"
#: Tokens remembered after use (to say "used already" rather than "wrong", and to mask them in the log page).
TOKENS_REMEMBERED = 100
#: What a used token's link answers.
USED_TOKEN = ("This link no longer logs in: each link logs in one browser once, and a newer link replaces it. For a "
              "new one, type /console in the bot's terminal, or send /console to the bot in a private chat as an "
              "admin.")


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class ConsoleSession:
    """One browser's session: its CSRF token, and whether it has logged in."""

    id: str
    csrf: str
    authed: bool = False
    last_seen: float = field(default_factory=time.monotonic)


class SessionStore:
    """The console's sessions, in this process (each process serves its own console)."""

    def __init__(self, clock=time.monotonic) -> None:
        self.clock = clock
        self._sessions: OrderedDict[str, ConsoleSession] = OrderedDict()

    def new(self, authed: bool = False) -> ConsoleSession:
        """A fresh session with a fresh id and CSRF token."""
        while len(self._sessions) >= MAX_SESSIONS:
            self._sessions.popitem(last=False)
        session = ConsoleSession(id=secrets.token_urlsafe(32), csrf=secrets.token_urlsafe(32), authed=authed,
                                 last_seen=self.clock())
        self._sessions[session.id] = session
        return session

    def get(self, sid: str | None) -> ConsoleSession | None:
        """The live session of a cookie value, or None."""
        if not sid:
            return None
        session = self._sessions.get(sid)
        if session is None:
            return None
        now = self.clock()
        if now - session.last_seen > SESSION_IDLE_SECONDS:
            del self._sessions[sid]
            return None
        session.last_seen = now
        self._sessions.move_to_end(sid)
        return session

    def drop(self, sid: str) -> None:
        """End a session (log out, or replaced at login)."""
        self._sessions.pop(sid, None)


def csrf_ok(session: ConsoleSession | None, given: Any) -> bool:
    """True when ``given`` is the session's CSRF token."""
    return (session is not None and isinstance(given, str) and bool(given)
            and hmac.compare_digest(given.encode(), session.csrf.encode()))


class Access:
    """The console's credentials: the password in force, or this start's token."""

    def __init__(self, config: Callable[[], Config], data_dir: Path) -> None:
        self.config = config
        #: the token that logs in now ('' once it was used and no new one was asked for)
        self.token = secrets.token_urlsafe(24)
        #: every token made, newest last (the used ones answer "used already"; the log page masks them all)
        self.issued: list[str] = [self.token]
        self.guard = AuthGuard(path=data_dir / LOCKOUT_FILE)

    def renew(self) -> str:
        """A new one-time token; an earlier one not used yet stops working."""
        self.token = secrets.token_urlsafe(24)
        self.issued = [*self.issued, self.token][-TOKENS_REMEMBERED:]
        return self.token

    @property
    def password(self) -> str:
        """``web_console_password`` as now in force ('' when unset)."""
        return self.config().web_console_password

    @property
    def mode(self) -> str:
        """``password`` when a password is set, else ``token``."""
        return "password" if self.password else "token"

    def secret_matches(self, given: str) -> bool:
        """True when ``given`` is the password (or, without one, the token not used yet)."""
        expected = self.password or self.token
        return bool(given) and bool(expected) and hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))

    def used_token(self, given: str) -> bool:
        """True when ``given`` is a token made here that no longer logs in (used, or replaced by a newer one)."""
        return self.mode == "token" and any(hmac.compare_digest(given.encode("utf-8"), old.encode("utf-8"))
                                            for old in self.issued if old != self.token)

    def locked_for(self, client: str) -> float:
        """Seconds this client is still locked out (0 when not)."""
        return self.guard.locked_for(_key(client))

    def attempt(self, client: str, given: str) -> str | None:
        """Check one login; None when it succeeded, else the sentence to show. Failures count to the lockout."""
        left = self.locked_for(client)
        if left:
            return f"Too many failed logins from your address. Try again in {_minutes(left)}."
        if self.secret_matches(given):
            self.guard.succeed(_key(client))
            if self.mode == "token":
                self.token = ""  # one-time: the link is spent
            logger.info("web console: login from %s%s", client, " with the one-time link" if self.mode == "token"
                        else "")
            return None
        if self.used_token(given):  # the operator's own old link, not a guess: no lockout for it
            logger.info("web console: a used or replaced link was opened from %s", client)
            return USED_TOKEN
        what = "password" if self.mode == "password" else "token"
        logger.warning("web console: wrong %s from %s", what, client)
        if self.guard.fail(_key(client)):
            logger.warning("web console: %s is locked out for 10 minutes", client)
            return f"Wrong {what}. Too many failed logins: your address is locked out for 10 minutes."
        return f"Wrong {what}."


def _key(client: str) -> str:
    return f"console:{client}"


def _minutes(seconds: float) -> str:
    n = max(1, -(-int(seconds) // 60))
    return "1 minute" if n == 1 else f"{n} minutes"
