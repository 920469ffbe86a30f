"""Usage and caps end to end: app.py on the fake Bot API and fake OpenAI server, replies streamed (the default).

A streamed answer's usage comes from the server (``stream_options.include_usage``); an endpoint that refuses
``stream_options`` is still answered and counted with the tokenizer; ``/usage`` shows the figures; the person
cap refuses with its sentence.
"""

from __future__ import annotations

import re

from tests.e2e.test_telegram import BOT, settings, wait_chat, wait_sent
from tests.fakes.bot_process import BotProcess
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_api import FakeTelegramAPI

REFUSAL = re.compile(r"You have used your daily limit of 150 tokens; it resets at midnight "
                     r"\(00:00 UTC, in (\d+ h )?\d+ min\)\.")


def test_streamed_usage_is_recorded_shown_and_capped(tmp_path):
    with FakeTelegramAPI(username=BOT) as api, FakeOpenAIServer() as llm:
        proc = BotProcess(tmp_path, **settings(api, llm, timezone="UTC", usage_cap_user_daily_tokens=150,
                                               model="chat-model")).start()
        try:
            llm.enqueue_text("Hello Alice.", usage={"prompt_tokens": 140, "completion_tokens": 20,
                                                     "prompt_tokens_details": {"cached_tokens": 128}})
            api.push_text(1001, "hello", user_id=1001, first_name="Alice")
            assert wait_sent(api, 1001, 1) == ["Hello Alice."]
            assert llm.requests[-1]["stream"] is True
            assert llm.requests[-1]["stream_options"] == {"include_usage": True}
            api.push_text(1001, "/usage", user_id=1001, first_name="Alice")
            lines = wait_sent(api, 1001, 2)[1].splitlines()
            assert lines[1:5] == [
                "This chat: 160 today, 160 this month",
                "• chat-model: 160 today, 160 this month (1 call, 128 of its prompt tokens cached)",
                "You: 160 today of a daily cap of 150 (reached), 160 this month",
                "• chat-model: 160 today, 160 this month (1 call, 128 of its prompt tokens cached)",
            ]
            api.push_text(1001, "again", user_id=1001, first_name="Alice")
            texts = wait_sent(api, 1001, 3)
            assert REFUSAL.fullmatch(texts[2]), texts[2]
            assert len(llm.requests) == 1

            # an endpoint that refuses stream_options: answered all the same, counted with the tokenizer
            llm.refuse_stream_options = 400
            llm.enqueue_text("Hello Bob.")
            api.push_text(1002, "hello", user_id=1002, first_name="Bob")
            assert wait_sent(api, 1002, 1) == ["Hello Bob."]
            assert ["stream_options" in r for r in llm.requests[1:]] == [True, False]
            api.push_text(1002, "/usage", user_id=1002, first_name="Bob")
            usage = wait_chat(api, 1002, lambda texts: len(texts) >= 2)[1]
            mine = re.search(r"^You: ([\d,]+) today", usage, re.M)
            # the request (tools included) and the answer, counted
            assert mine and int(mine[1].replace(",", "")) > 100, usage
        finally:
            assert proc.stop() == 0
        assert "Traceback" not in proc.log()
        assert "refuses stream_options" in proc.log()
