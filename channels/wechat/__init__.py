"""The legacy WeChat channel (itchat-uos, the web protocol)."""
