"""Who a web-chat visitor is, and how fast they may write.

A public visitor is a random id in a cookie signed with HMAC-SHA256 under a key every process shares (kept in
the database by the console), so a visitor cannot pick another's id and any process knows them. The form
token of the public page is derived from the same key and the visitor id, so it needs no server-side session.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections import OrderedDict, deque

#: a visitor id: what :func:`new_visitor` makes
VISITOR_ID = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
#: the operator's own chat on the console's ``/chat`` page
OPERATOR_ID = "console"


def new_visitor() -> str:
    """A fresh random visitor id."""
    return secrets.token_urlsafe(16)


class VisitorSigner:
    """Signs and checks visitor cookies and form tokens with one shared key."""

    def __init__(self, key: bytes) -> None:
        self.key = key

    def _mac(self, purpose: str, visitor: str) -> str:
        return hmac.new(self.key, f"{purpose}:{visitor}".encode(), hashlib.sha256).hexdigest()[:32]

    def cookie(self, visitor: str) -> str:
        """The cookie value for ``visitor``."""
        return f"{visitor}.{self._mac('visitor', visitor)}"

    def visitor(self, cookie: str | None) -> str | None:
        """The visitor id of a cookie value, or None when it is missing, malformed or not signed by us."""
        if not cookie or "." not in cookie:
            return None
        visitor, _, mac = cookie.rpartition(".")
        if not VISITOR_ID.match(visitor) or not hmac.compare_digest(mac, self._mac("visitor", visitor)):
            return None
        return visitor

    def form_token(self, visitor: str) -> str:
        """The token a visitor's page sends with each message (CSRF)."""
        return self._mac("form", visitor)

    def form_ok(self, visitor: str, token: str | None) -> bool:
        """True when ``token`` is ``visitor``'s form token."""
        return bool(token) and hmac.compare_digest(str(token), self.form_token(visitor))


class RateLimit:
    """At most ``per_minute`` messages per visitor in any 60 seconds (a sliding window, in this process)."""

    #: visitors remembered at most (the least recently seen go first)
    MAX_VISITORS = 10_000

    def __init__(self, clock=time.monotonic) -> None:
        self.clock = clock
        self._sent: OrderedDict[str, deque[float]] = OrderedDict()

    def take(self, visitor: str, per_minute: int) -> float:
        """Count one message of ``visitor``: 0 when it may go, else the seconds until it may (not counted)."""
        now = self.clock()
        times = self._sent.pop(visitor, None) or deque()
        while times and now - times[0] >= 60.0:
            times.popleft()
        wait = 0.0
        if len(times) >= per_minute:
            wait = 60.0 - (now - times[0])
        else:
            times.append(now)
        self._sent[visitor] = times
        while len(self._sent) > self.MAX_VISITORS:
            self._sent.popitem(last=False)
        return wait
