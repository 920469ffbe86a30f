"""Messaging channels (platform adapters): terminal, Telegram, WeChat (weixin and the legacy web login), Feishu / Lark,
DingTalk, WeCom and the web chat, the channel base class, the shared reply splitter and the registry. A channel
imports only ``core``, ``config`` and ``channels``; the dispatcher drives it."""
