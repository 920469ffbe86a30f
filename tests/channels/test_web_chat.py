"""The web chat channel's parts: the event hub's replay, visitor signatures, the rate limit, safe Markdown."""

from __future__ import annotations

from channels.web.channel import Hub, WebChannel
from channels.web.render import render_markdown
from channels.web.visitors import RateLimit, VisitorSigner, new_visitor
from config.settings import Config


def test_markdown_is_rendered_and_raw_html_is_escaped():
    html = render_markdown("**bold** <script>alert(1)</script> <img src=x onerror=alert(2)> [x](javascript:alert(3))")
    assert "<strong>bold</strong>" in html
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<img" not in html and 'href="javascript' not in html


def test_visitor_cookies_are_signed_and_form_tokens_belong_to_one_visitor():
    signer = VisitorSigner(b"k" * 32)
    visitor = new_visitor()
    cookie = signer.cookie(visitor)
    assert signer.visitor(cookie) == visitor
    other = new_visitor()
    assert signer.visitor(other + "." + cookie.rsplit(".", 1)[1]) is None  # another id with this signature
    assert signer.visitor(cookie[:-1] + ("0" if cookie[-1] != "0" else "1")) is None
    assert VisitorSigner(b"j" * 32).visitor(cookie) is None  # another key
    assert signer.visitor(None) is None and signer.visitor("no-dot") is None
    assert signer.form_ok(visitor, signer.form_token(visitor))
    assert not signer.form_ok(other, signer.form_token(visitor)) and not signer.form_ok(visitor, None)


def test_the_rate_limit_is_a_sliding_minute_per_visitor():
    now = [0.0]
    rate = RateLimit(clock=lambda: now[0])
    assert [rate.take("a", 2) for _ in range(2)] == [0, 0]
    assert rate.take("a", 2) == 60.0
    assert rate.take("b", 2) == 0  # another visitor has their own
    now[0] = 30.0
    assert rate.take("a", 2) == 30.0
    now[0] = 60.0
    assert rate.take("a", 2) == 0


async def test_a_page_that_reconnects_gets_what_it_missed_or_is_told_to_reload():
    hub = Hub()
    first = hub.publish("v1", {"kind": "reply", "text": "one"})
    sub, missed, resumed = hub.subscribe("v1", None)
    assert (missed, resumed) == ([], False)  # a first connection loads the history
    second = hub.publish("v1", {"kind": "reply", "text": "two"})
    hub.publish("v2", {"kind": "reply", "text": "someone else's"})
    assert sub.queue.get_nowait() == second and sub.queue.empty()
    hub.unsubscribe(sub)
    third = hub.publish("v1", {"kind": "reply", "text": "three"})
    _, missed, resumed = hub.subscribe("v1", first["id"])
    assert resumed and missed == [second, third]
    _, missed, resumed = hub.subscribe("v1", "otherboot-5")  # another process, or before a restart
    assert (missed, resumed) == ([], False)
    hub.publish("v1", {"kind": "typing"}, keep=False)
    _, missed, resumed = hub.subscribe("v1", third["id"])
    assert (missed, resumed) == ([], True)  # "typing…" is not replayed


async def test_streamed_answers_and_the_operator_flag():
    channel = WebChannel(Config(channel_type="web"))
    got = []
    async def handler(msg):
        got.append(msg)
        return True
    channel.set_handler(handler)
    await channel.start()
    sub, _, _ = channel.hub.subscribe("console", None)
    assert await channel.receive("console", "hi", "c1", operator=True)
    assert got[0].extra == {"operator": True} and got[0].message_id == "console:c1" and got[0].chat_id == "console"
    assert await channel.receive("visitor1234567890", "hi", "c1")
    assert got[1].extra == {} and got[1].message_id == "visitor1234567890:c1"
    stream = channel.open_stream(got[0])
    await stream.push("Hello")
    await stream.push("Hello")  # unchanged: not sent again
    await stream.push("Hello **world**")
    await stream.finish("Hello **world**!")
    events = []
    while not sub.queue.empty():
        events.append(sub.queue.get_nowait())
    assert [e["kind"] for e in events] == ["user", "partial", "partial", "final"]
    assert events[-1]["html"] == "<p>Hello <strong>world</strong>!</p>\n"
    assert WebChannel.preflight(Config(web_console_port=0)) is not None
    assert WebChannel.preflight(Config()) is None
    await channel.stop()
    assert sub.queue.get_nowait() is None
