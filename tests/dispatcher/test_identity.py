"""Tests for dispatcher/identity.py: the one derivation of a session (DESIGN §1.3)."""

import pytest

from config.settings import Config
from core.messages import IncomingMessage
from core.records import SessionInfo, is_shared_group
from dispatcher.identity import session_for


def private(**kw):
    return IncomingMessage(channel="telegram", chat_id="12345", user_id="12345", user_name="Ada", text="hi", **kw)


def group(**kw):
    kw.setdefault("user_id", "42")
    return IncomingMessage(channel="telegram", chat_id="-100", text="hi", is_group=True, group_name="Team",
                           user_name="Bob", **kw)


@pytest.mark.parametrize("shared", [True, False])
def test_private_chat(shared):
    assert session_for(private(), Config(group_shared_session=shared)) == SessionInfo(
        session_id="telegram:12345", channel="telegram", chat_id="12345", user_id="12345", is_group=False,
        title="Ada")


def test_shared_group_session_belongs_to_no_member():
    info = session_for(group(), Config(group_shared_session=True))
    assert info == SessionInfo(session_id="telegram:group:-100", channel="telegram", chat_id="-100", user_id="",
                               is_group=True, title="Team")
    assert is_shared_group(info)
    # every member of the group is in the same session
    assert session_for(group(user_id="7"), Config(group_shared_session=True)) == info


def test_per_member_group_session():
    info = session_for(group(), Config(group_shared_session=False))
    assert info == SessionInfo(session_id="telegram:group:-100:42", channel="telegram", chat_id="-100",
                               user_id="42", is_group=True, title="Team")
    assert not is_shared_group(info)
    assert not is_shared_group(session_for(private(), Config()))


def test_a_members_group_session_is_never_their_private_session():
    member_private = IncomingMessage(channel="telegram", chat_id="42", user_id="42", text="x")
    cfg = Config(group_shared_session=False)
    assert session_for(member_private, cfg).session_id != session_for(group(), cfg).session_id
