"""Webhook delivery as Telegram does it, for several bot processes: per chat in order, redelivered on failure.

:class:`WebhookRouter` is what :class:`tests.fakes.telegram_api.FakeTelegramAPI` uses once
``set_webhook_targets`` is called. It ignores the URL each bot process registered with ``setWebhook`` (every
process of a deployment registers the same public one, the load balancer's) and POSTs to its own list of
targets instead: the bots' own ports round robin, or one nginx URL in front of them.

Like Telegram, one chat's updates go out one at a time in order: the next waits until the previous one was
answered 200. A delivery that fails (connection refused, a non-200 answer, no answer within ``timeout``)
is sent again after ``retry_delay`` seconds, to the next target. A timed-out delivery may still have
reached its bot, so a target can see an update twice: the bots must deduplicate, as with Telegram.
Different chats are delivered concurrently, one thread per chat.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One POST of one update: where it went, what came back (0: no answer), when it ended."""

    update_id: int
    chat_id: int | None
    target: str
    status: int
    at: float


class WebhookRouter:
    """Delivers updates to ``targets``: round robin, per chat in order, redelivered on failure."""

    def __init__(self, targets: list[str], *, timeout: float = 5.0, retry_delay: float = 0.2) -> None:
        if not targets:
            raise ValueError("at least one webhook target is needed")
        self.targets = list(targets)
        self.timeout = timeout
        self.retry_delay = retry_delay
        #: every POST, in the order they ended
        self.attempts: list[Attempt] = []
        #: update id -> the target that answered it 200 (the last one, when it was delivered twice)
        self.delivered: dict[int, str] = {}
        #: chat id -> the target its updates go to first (to talk to one process on purpose)
        self.pinned: dict[int, str] = {}
        self._lock = threading.Condition()
        self._turn = itertools.count()
        self._queues: dict[int | None, deque[tuple[dict[str, Any], dict[str, Any]]]] = {}
        self._workers: dict[int | None, threading.Thread] = {}
        self._stopping = threading.Event()

    def submit(self, hook: dict[str, Any], update: dict[str, Any]) -> None:
        """Queue ``update`` behind the earlier ones of its chat (``hook`` gives the secret token)."""
        msg = update.get("message") or update.get("edited_message") or {}
        chat = (msg.get("chat") or {}).get("id")
        with self._lock:
            self._queues.setdefault(chat, deque()).append((hook, update))
            worker = self._workers.get(chat)
            if worker is None or not worker.is_alive():
                worker = threading.Thread(target=self._run, args=(chat,), name=f"fake-telegram-webhook-{chat}",
                                          daemon=True)
                self._workers[chat] = worker
                worker.start()
            self._lock.notify_all()

    @property
    def pending(self) -> int:
        """Updates queued or being delivered, not yet answered 200."""
        with self._lock:
            return sum(len(q) for q in self._queues.values())

    def wait_delivered(self, timeout: float = 10.0) -> bool:
        """Wait until nothing is pending; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while any(self._queues.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
            return True

    def stop(self) -> None:
        """Stop delivering (what is queued stays undelivered); the threads end soon after."""
        self._stopping.set()
        with self._lock:
            self._lock.notify_all()

    def threads(self) -> list[threading.Thread]:
        """The delivery threads, to join at stop."""
        with self._lock:
            return list(self._workers.values())

    def _run(self, chat: int | None) -> None:
        while not self._stopping.is_set():
            with self._lock:
                queue = self._queues.get(chat)
                if not queue:
                    self._workers.pop(chat, None)
                    return
                hook, update = queue[0]
            self._deliver(hook, update, chat)
            with self._lock:
                if queue and queue[0][1] is update:
                    queue.popleft()
                self._lock.notify_all()

    def _deliver(self, hook: dict[str, Any], update: dict[str, Any], chat: int | None) -> None:
        """POST until a target answers 200 (or the router stops)."""
        pinned = self.pinned.get(chat) if chat is not None else None
        index = self.targets.index(pinned) if pinned in self.targets else next(self._turn) % len(self.targets)
        while not self._stopping.is_set():
            target = self.targets[index]
            status = post_update(target, update, hook.get("secret_token"), self.timeout)
            with self._lock:
                self.attempts.append(Attempt(update["update_id"], chat, target, status, time.monotonic()))
                if status == 200:
                    self.delivered[update["update_id"]] = target
                    return
            logger.debug("fake-telegram: update %s to %s failed (%s); redelivering", update["update_id"], target,
                         status)
            index = (index + 1) % len(self.targets)
            self._stopping.wait(self.retry_delay)


def post_update(url: str, update: dict[str, Any], secret: str | None, timeout: float) -> int:
    """POST one update as Telegram does; the HTTP status, or 0 when no answer came (refused, reset, timeout)."""
    headers = {"Content-Type": "application/json"}
    if secret:
        headers["X-Telegram-Bot-Api-Secret-Token"] = secret
    req = urllib.request.Request(url, data=json.dumps(update).encode(), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code
    except (urllib.error.URLError, OSError) as exc:
        logger.debug("fake-telegram: webhook POST to %s failed: %s", url, exc)
        return 0
