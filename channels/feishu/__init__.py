"""The feishu channel: Feishu / Lark over lark-oapi (see channels/feishu/channel.py)."""
