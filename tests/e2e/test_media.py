"""Photos and voice notes through ``python app.py`` (DESIGN §5.1): the fake Bot API serves the files, the fake
OpenAI server answers chat requests and ``/audio/transcriptions``; a restart sees words only, and ``/forget``
deletes the image files."""

from __future__ import annotations

import json
import sqlite3

from tests.e2e.test_telegram import settings, wait_chat
from tests.fakes.bot_process import BotProcess
from tests.fakes.openai_server import FakeOpenAIServer, message_text
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.media.harness import OGG_VOICE, image_parts, jpeg


def stored(folder, session_id):
    with sqlite3.connect(folder / "data" / "chatbot.db") as db:
        rows = db.execute("SELECT content FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)).fetchall()
    return [json.loads(r[0]) for r in rows]


def test_photo_voice_restart_and_forget(tmp_path):
    with FakeTelegramAPI() as api, FakeOpenAIServer(model="gpt-4o-mini") as llm:
        bot = BotProcess(tmp_path, **settings(api, llm, model="gpt-4o-mini")).start()
        try:
            llm.enqueue_text("A red square.")
            llm.enqueue_text("a plain red square")
            api.push_photo(2001, jpeg(), user_id=2001, caption="what is it?")
            wait_chat(api, 2001, lambda t: t == ["A red square."])
            llm.wait_for_requests(2)
            assert len(image_parts(llm.requests[0])) == 1
            llm.default_transcript = "tell me a joke"
            api.push_voice(2001, OGG_VOICE, user_id=2001)
            texts = wait_chat(api, 2001, lambda t: len(t) == 2)
            assert texts[1] == '(heard: "tell me a joke")\n\necho: tell me a joke'
            assert llm.transcriptions[0]["audio"] == OGG_VOICE
            messages = stored(tmp_path, "telegram:2001")
            assert messages[0]["content"] == "[image: a plain red square]\nwhat is it?"
            assert messages[2] == {"role": "user", "content": "tell me a joke", "voice": True}
            assert "base64" not in json.dumps(messages)
            folder = tmp_path / "data" / "media" / "telegram_2001"
            assert len(list(folder.iterdir())) == 1
            assert bot.stop() == 0
            bot.start()  # a restart restores words, never the image
            api.push_text(2001, "what did I send you?", user_id=2001)
            wait_chat(api, 2001, lambda t: len(t) == 3)
            last = llm.requests[-1]
            assert image_parts(last) == []
            assert [message_text(m) for m in last["messages"] if m["role"] == "user"][:2] == [
                "[image: a plain red square]\nwhat is it?", "tell me a joke"]
            api.push_text(2001, "/forget", user_id=2001)
            wait_chat(api, 2001, lambda t: len(t) == 4)
            api.push_text(2001, "/forget confirm", user_id=2001)
            texts = wait_chat(api, 2001, lambda t: len(t) == 5)
            assert "1 image file" in texts[4]
            assert not folder.exists()
        finally:
            assert bot.stop() == 0
        assert "Traceback" not in bot.log()
