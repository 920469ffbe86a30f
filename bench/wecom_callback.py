"""How fast the bot answers WeCom's callback: decrypt and check (wechatpy), journal, 200.

WeCom wants an answer within five seconds, or it sends the callback again; the reply itself goes out later
through the send API. ``python app.py`` (channel wecom, SQLite file) against the fake WeCom API and the fake
OpenAI server; the callbacks are posted one after another from this process (each a new connection, as WeCom's
are), to different users, and the time is from the POST to the response. Also: from the POST to the reply's
arrival at the fake send API (the whole turn with a fake model that answers at once).

Run: ``python bench/wecom_callback.py [--messages 200]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import median, percentile, print_table  # noqa: E402
from tests.console.conftest import free_port  # noqa: E402
from tests.fakes.bot_process import BotProcess  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer  # noqa: E402
from tests.fakes.wecom_api import CallbackSender, FakeWecomAPI, new_aes_key  # noqa: E402

CORP, AGENT, SECRET, TOKEN = "ww0123456789abcdef", "1000002", "bench-secret", "bench-token"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, FakeWecomAPI(corp_id=CORP, agent_id=AGENT, secret=SECRET) as api, \
            FakeOpenAIServer() as llm:
        port, key = free_port(), new_aes_key()
        bot = BotProcess(Path(folder), channel_type="wecom", wecom_corp_id=CORP, wecom_agent_id=AGENT,
                         wecom_secret=SECRET, wecom_token=TOKEN, wecom_aes_key=key, wecom_port=port,
                         wecom_base_url=api.base_url, open_ai_api_base=llm.base_url, open_ai_api_key="bench",
                         data_dir="data", web_console_port=0, memory_embedding_model="").start()
        sender = CallbackSender(f"http://127.0.0.1:{port}/wecom/callback", TOKEN, key, CORP, AGENT)
        answered, replied = [], []
        try:
            for i in range(args.messages):
                user = f"user{i}"
                start = time.perf_counter()
                _, response = sender.text(user, f"hello {i}")
                answered.append((time.perf_counter() - start) * 1000)
                assert response.status_code == 200
                api.wait_sent(user, 1, timeout=30)
                replied.append((time.perf_counter() - start) * 1000)
        finally:
            bot.stop()
    print_table([
        ("callback answered (decrypt, journal, 200)",
         f"median {median(answered):.1f} ms, p95 {percentile(answered, 95):.1f} ms, max {max(answered):.1f} ms",
         "well under WeCom's 5 s"),
        ("reply at the send API (the whole turn, fake model)",
         f"median {median(replied):.1f} ms, p95 {percentile(replied, 95):.1f} ms", "–"),
    ])
    print(f"gettoken calls: {api.tokens_issued}")  # noqa: T201


if __name__ == "__main__":
    main()
