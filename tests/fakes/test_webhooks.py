"""Webhook delivery to several targets (tests/fakes/webhooks.py) and the fake's 409 for a second getUpdates."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.fakes.cluster import free_port
from tests.fakes.telegram_api import FakeTelegramAPI


class Receiver:
    """A webhook endpoint that records the update ids it accepted and can answer errors first."""

    def __init__(self, fail_first: int = 0, status: int = 500) -> None:
        self.received: list[int] = []
        self.fail_left = fail_first
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                code = 200
                if receiver.fail_left:
                    receiver.fail_left -= 1
                    code = status
                else:
                    receiver.received.append(body["update_id"])
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/telegram"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receivers():
    made: list[Receiver] = []

    def make(**kwargs) -> Receiver:
        made.append(Receiver(**kwargs))
        return made[-1]

    yield make
    for r in made:
        r.close()


def test_round_robin_in_order_with_redelivery_to_the_next_target(receivers):
    dead = f"http://127.0.0.1:{free_port()}/telegram"  # connection refused
    flaky = receivers(fail_first=1)
    good = receivers()
    with FakeTelegramAPI() as api:
        router = api.set_webhook_targets([dead, flaky.url, good.url], retry_delay=0.01)
        api.webhook = {"url": "http://ignored/telegram", "secret_token": "s", "allowed_updates": None}
        ids = [api.push_text(5, f"m{i}", user_id=5)["update_id"] for i in range(6)]
        assert router.wait_delivered(10)
    # one chat: every update accepted exactly once, in order, though deliveries failed and went on
    assert sorted(flaky.received + good.received) == ids
    assert [i for i in ids if i in flaky.received] == flaky.received
    assert [i for i in ids if i in good.received] == good.received
    assert {a.status for a in router.attempts if a.target == dead} == {0}
    assert [a.status for a in router.attempts if a.target == flaky.url][0] == 500
    assert set(router.delivered) == set(ids)
    first = router.attempts[0]
    assert first.status != 200 and router.attempts[1].update_id == first.update_id


def test_pinned_chat_goes_to_its_target(receivers):
    a, b = receivers(), receivers()
    with FakeTelegramAPI() as api:
        router = api.set_webhook_targets([a.url, b.url])
        router.pinned[7] = b.url
        api.webhook = {"url": "http://ignored/telegram", "secret_token": None, "allowed_updates": None}
        ids = [api.push_text(7, f"m{i}", user_id=7)["update_id"] for i in range(3)]
        assert router.wait_delivered(10)
    assert (a.received, b.received) == ([], ids)


def get_updates(api: FakeTelegramAPI, timeout: int) -> tuple[int, dict]:
    url = f"{api.base_url}{api.token}/getUpdates?timeout={timeout}"
    try:
        with urllib.request.urlopen(url, timeout=timeout + 5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def test_a_second_get_updates_ends_the_waiting_one_with_409():
    with FakeTelegramAPI() as api:
        api.peer_owner = lambda client: ("client", client[1])
        first: list[tuple[int, dict]] = []
        waiting = threading.Thread(target=lambda: first.append(get_updates(api, 5)))
        waiting.start()
        deadline = time.monotonic() + 5
        while not api.pollers and time.monotonic() < deadline:
            time.sleep(0.01)
        assert get_updates(api, 0) == (200, {"ok": True, "result": []})
        waiting.join(5)
        assert first == [(409, {"ok": False, "error_code": 409, "description": "Conflict: terminated by other "
                                "getUpdates request; make sure that only one bot instance is running"})]
        owners = [owner for _, owner in api.pollers]
        assert len(owners) == 2 and owners[0] != owners[1] and owners[0][0] == "client"
