"""WeChat through its official bot API (ClawBot / iLink): client, login, channel, text."""
