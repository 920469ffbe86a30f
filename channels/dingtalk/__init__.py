"""The dingtalk channel: DingTalk over dingtalk-stream (see channels/dingtalk/channel.py)."""
