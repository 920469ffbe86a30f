"""WeCom (企业微信): a self-built application's callbacks and send API (DESIGN §5, issue 45)."""
