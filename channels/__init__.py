"""Platform adapters: the terminal, Telegram, WeChat (``weixin``, the official bot API; ``wechat``, the legacy web
login), Feishu / Lark (``feishu``) and DingTalk (``dingtalk``), the ``BaseChannel`` they share and the registry
that names them for ``channel_type``. The dispatcher, which turns their messages into replies, is
``dispatcher/``."""
