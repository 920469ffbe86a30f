"""The wecom channel's parts: text splitting at 2,048 bytes, reading callbacks, the shared token, preflight."""

from __future__ import annotations

import asyncio

from channels.wecom.channel import WecomChannel
from channels.wecom.text import MAX_TEXT_BYTES, split_text
from channels.wecom.tokens import MemoryShared, TokenCache
from config.settings import Config
from tests.fakes.wecom_api import new_aes_key

CFG = dict(channel_type="wecom", wecom_corp_id="ww1", wecom_agent_id="1000002", wecom_secret="s",
           wecom_token="t", wecom_aes_key=new_aes_key())


def test_split_text_keeps_every_piece_within_the_byte_limit_and_cuts_at_lines():
    assert split_text("short") == ["short"]
    text = "\n\n".join(["段落" * 300] * 4)  # 1,800 bytes a paragraph
    pieces = split_text(text)
    assert all(len(p.encode()) <= MAX_TEXT_BYTES for p in pieces)
    assert [p for p in pieces] == ["段落" * 300] * 4
    one_line = "好" * 2000
    pieces = split_text(one_line)
    assert "".join(pieces) == one_line and all(len(p.encode()) <= MAX_TEXT_BYTES for p in pieces)


def test_callbacks_become_messages_private_group_and_ignored_events():
    channel = WecomChannel(Config(**CFG))
    private = channel.to_incoming({"MsgType": "text", "FromUserName": "zhangsan", "Content": "hi", "MsgId": "9",
                                   "CreateTime": "1700000000", "AgentID": "1000002"})
    assert (private.chat_id, private.user_id, private.is_group, private.message_id) == ("zhangsan", "zhangsan", False,
                                                                                         "9")
    group = channel.to_incoming({"MsgType": "text", "FromUserName": "lisi", "Content": "@bot hi", "MsgId": "10",
                                 "ChatId": "wrchat", "ChatType": "group"})
    assert (group.chat_id, group.user_id, group.is_group) == ("wrchat", "lisi", True)
    photo = channel.to_incoming({"MsgType": "image", "FromUserName": "zhangsan", "MediaId": "m1", "MsgId": "11",
                                 "PicUrl": "http://x"})
    assert photo.content_type == "photo" and photo.extra == {"media_id": "m1"}
    assert channel.to_incoming({"MsgType": "event", "Event": "enter_agent", "FromUserName": "zhangsan"}) is None


def test_preflight_names_what_is_missing():
    assert WecomChannel.preflight(Config(**CFG)) is None
    assert "set wecom_secret" in WecomChannel.preflight(Config(**{**CFG, "wecom_secret": ""}))
    missing = WecomChannel.preflight(Config(**{**CFG, "wecom_token": "", "wecom_aes_key": ""}))
    assert missing.startswith("the callback is not configured") and "/wecom/callback" in missing
    assert "EncodingAESKey" in WecomChannel.preflight(Config(**{**CFG, "wecom_aes_key": "short"}))


async def test_the_token_is_fetched_once_for_concurrent_callers_and_replaced_once_when_rejected():
    fetched = []

    async def fetch():
        fetched.append(1)
        await asyncio.sleep(0.05)
        return f"token{len(fetched)}", 7200

    shared = MemoryShared()
    caches = [TokenCache(shared, "wecom_token:ww1:1", fetch) for _ in range(3)]  # three "processes"
    assert await asyncio.gather(*(c.get() for c in caches)) == ["token1"] * 3
    assert len(fetched) == 1
    replaced = await asyncio.gather(*(c.get(rejected="token1") for c in caches))
    assert replaced == ["token2"] * 3 and len(fetched) == 2
