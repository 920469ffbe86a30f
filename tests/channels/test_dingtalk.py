"""The dingtalk channel's reading of DingTalk's bot messages (the whole channel runs in tests/e2e/test_dingtalk.py,
where the SDK can be pointed at the fake before it is imported)."""

from __future__ import annotations

from dingtalk_stream import ChatbotMessage

from channels.dingtalk.channel import DingTalkChannel, _title, to_incoming
from config.settings import Config


def message(**changes) -> ChatbotMessage:
    data = {"conversationId": "cid_1", "msgId": "m1", "senderNick": "Bob", "senderStaffId": "bob01",
            "senderId": "$:LWCP_v1:$x", "conversationType": "1", "createAt": 1773144000000, "robotCode": "dingx",
            "msgtype": "text", "text": {"content": " hello "}}
    data.update(changes)
    return ChatbotMessage.from_dict(data)


def test_private_and_group_messages():
    private = to_incoming(message())
    assert (private.chat_id, private.user_id, private.text, private.is_group) == ("cid_1", "bob01", "hello", False)
    assert private.extra == {"staff_id": "bob01", "robot_code": "dingx"}
    group = to_incoming(message(conversationType="2", conversationTitle="Team", isInAtList=True))
    assert (group.is_group, group.group_name, group.mentions_bot, group.user_name) == (True, "Team", True, "Bob")
    picture = to_incoming(message(msgtype="picture", content={"downloadCode": "x"}))
    assert (picture.content_type, picture.text) == ("photo", "")
    assert to_incoming(message(conversationId="")) is None


def test_preflight_names_the_missing_keys_and_titles_are_short():
    assert "dingtalk_client_id" in DingTalkChannel.preflight(Config())
    assert DingTalkChannel.preflight(Config(dingtalk_client_id="a", dingtalk_client_secret="b")) is None
    assert _title("## Plan for **today**\nmore") == "Plan for today"
