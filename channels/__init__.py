"""Messaging channels (platform adapters): terminal, Telegram, WeChat (weixin and the legacy web login), the
channel base class and the registry. A channel imports only ``core`` and ``config``; the dispatcher drives it."""
