"""Tests for dispatcher/triggers.py: triggers and the group whitelist."""

from config.settings import Config
from core.messages import IncomingMessage
from dispatcher.triggers import group_allowed, triggered_text


def private(text="hi", **kw):
    return IncomingMessage(channel="telegram", chat_id="12345", user_id="12345", text=text, **kw)


def group(text="hi", **kw):
    kw.setdefault("user_id", "42")
    return IncomingMessage(channel="telegram", chat_id="-100", text=text, is_group=True, group_name="Team", **kw)


def test_private_prefix():
    cfg = Config()
    assert triggered_text(private("hello"), cfg) == "hello"
    cfg = Config(single_chat_prefix=["bot", "@bot"])
    assert triggered_text(private("hello"), cfg) is None
    assert triggered_text(private("bot what time"), cfg) == "what time"


def test_group_triggers():
    cfg = Config(group_chat_keyword=["weather"])
    assert triggered_text(group("just chatting"), cfg) is None
    assert triggered_text(group("@bot hello there"), cfg) == "hello there"
    assert triggered_text(group("what's the Weather"), cfg) == "what's the Weather"
    assert triggered_text(group("@mybot hi", mentions_bot=True), cfg, "mybot") == "hi"
    assert triggered_text(group("thanks", reply_to_bot=True), cfg) == "thanks"
    off = Config(group_at_off=True)
    assert triggered_text(group("@mybot hi", mentions_bot=True), off, "mybot") is None
    assert triggered_text(group("@bot hi"), off) == "hi"  # the prefix still works


def test_whitelist():
    assert group_allowed(group(), ["ALL_GROUP"])
    assert group_allowed(group(), ["Team"])
    assert group_allowed(group(), ["-100"])
    assert not group_allowed(group(), ["Other"])
