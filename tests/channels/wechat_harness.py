"""The offline WeChat harness of the channel tests: a real itchat core with filled storage and raw message dicts.

Raw messages go through itchat's own ``produce_msg`` (as its receiving loop does) into ``core.msgList``, from
where the channel's thread pulls them with ``configured_reply()``. Login never reaches the internet: each
core gets a fake ``auto_login`` (and ``send``) on the instance.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import itchat
from itchat.components.contact import update_local_chatrooms, update_local_friends
from itchat.components.messages import produce_msg
from itchat.returnvalues import ReturnValue

from channels.wechat.channel import WeChatChannel
from config.settings import Config
from core.messages import IncomingMessage

AT = "\u2005"
BOT_NICK = "Botty"
BOT_IN_GROUP = "Helper"  # the bot's DisplayName in the group
ROOM_TITLE = "Book Club"


class Login:
    """The per-login UserNames of one itchat session (they change at every login)."""

    def __init__(self, seed: str) -> None:
        self.bot = "@" + seed * 8 + "01"
        self.alice = "@" + seed * 8 + "a1"
        self.bob = "@" + seed * 8 + "b2"
        self.room = "@@" + seed * 16 + "c3"


class SendRecorder:
    """A fake for ``core.send``: records (text, toUserName) and answers like WeChat's success."""

    def __init__(self, ret: int = 0) -> None:
        self.calls: list[tuple[str, str]] = []
        self.ret = ret
        self.threads: list[str] = []

    def __call__(self, msg: str, toUserName: str | None = None, mediaId: Any = None) -> ReturnValue:  # noqa: N803
        self.calls.append((msg, toUserName or ""))
        self.threads.append(threading.current_thread().name)
        return ReturnValue({"BaseResponse": {"Ret": self.ret, "ErrMsg": "" if self.ret == 0 else "refused"}})


def make_core(login: Login) -> Any:
    """A real itchat core with a logged-in account, two friends and one group in its storage."""
    core = itchat.new_instance()
    core.loginInfo["url"] = "https://wx.invalid/cgi-bin/mmwebwx-bin"  # only formatted into URLs, never fetched
    core.loginInfo["wxuin"] = "1"
    core.storageClass.userName = login.bot
    core.storageClass.nickName = BOT_NICK
    core.memberList.append({"UserName": login.bot, "NickName": BOT_NICK, "RemarkName": "", "VerifyFlag": 0})
    update_local_friends(core, [
        {"UserName": login.alice, "NickName": "Alice Wang", "RemarkName": "Alice", "VerifyFlag": 0},
        {"UserName": login.bob, "NickName": "Bob", "RemarkName": "", "VerifyFlag": 0},
    ])
    update_local_chatrooms(core, [{
        "UserName": login.room, "NickName": ROOM_TITLE, "MemberList": [
            {"UserName": login.bot, "NickName": BOT_NICK, "DisplayName": BOT_IN_GROUP},
            {"UserName": login.alice, "NickName": "Alice Wang", "DisplayName": "Ali"},
            {"UserName": login.bob, "NickName": "Bob", "DisplayName": ""},
        ],
    }])
    core.send = SendRecorder()
    return core


def logs_in(core: Any) -> None:
    """Replace auto_login with one that succeeds at once, as a hot reload would."""
    def auto_login(**kwargs: Any) -> None:
        core.alive = True
        kwargs["loginCallback"]()
    core.auto_login = auto_login


_next_id = [7000000000000000000]


def raw(frm: str, to: str, content: str, *, msg_type: int = 1, age: float = 0, msg_id: str | None = None
        ) -> dict[str, Any]:
    """A raw message dict as webwxsync returns it in AddMsgList."""
    if msg_id is None:
        _next_id[0] += 1
        msg_id = str(_next_id[0])
    return {"MsgId": msg_id, "NewMsgId": int(msg_id), "FromUserName": frm, "ToUserName": to, "MsgType": msg_type,
            "Content": content, "CreateTime": int(time.time() - age), "Url": "", "AppMsgType": 0,
            "Status": 3, "FileName": "", "MediaId": ""}


def feed(core: Any, *messages: dict[str, Any]) -> None:
    """Hand raw messages to itchat as its receiving loop does."""
    for msg in produce_msg(core, list(messages)):
        core.msgList.put(msg)


class Harness:
    """A started channel on a fake-logged-in core, with an inbox of delivered messages."""

    def __init__(self, core: Any, config: Config) -> None:
        self.core = core
        self.channel = WeChatChannel(config, core=core)
        self.inbox: asyncio.Queue[IncomingMessage] = asyncio.Queue()
        self.channel.set_handler(self.inbox.put)

    async def next(self) -> IncomingMessage:
        return await asyncio.wait_for(self.inbox.get(), 2)
