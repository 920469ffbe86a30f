"""Photos and voice notes end to end in one process (DESIGN §5.1): the fake Bot API serves the files through
getFile and ``/file/bot<token>/<path>``, the real Telegram channel and dispatcher take them, and the real
``openai`` SDK talks to the fake OpenAI server; stored messages are read back from the real database."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from sqlalchemy import text

from agent.images import NOT_SEEN, REFUSED_NOTE
from agent.tokens import TokenCounter
from media.files import MAX_PIXELS, session_media_files
from media.intake import NO_VISION_ALONE, NO_VISION_CAPTION_NOTE, PHOTO_FAILED, VOICE_FAILED, VOICE_OFF
from memory.daily import DailyMemory
from memory.forget import forget_session
from tests.fakes.openai_server import FakeOpenAIServer, message_text
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.media.harness import OGG_VOICE, MediaBot, decoded, image_parts, jpeg


@pytest.fixture
def api():
    with FakeTelegramAPI() as server:
        yield server


@pytest.fixture
def srv():
    with FakeOpenAIServer(model="gpt-4o-mini") as server:
        yield server


async def test_a_photo_is_one_image_part_in_its_turn_and_words_after_it(api, srv, db_url, tmp_path):
    srv.enqueue_text("It is a red square.")  # the turn's answer
    srv.enqueue_text("A plain red square filling the frame.")  # the description call (the photo had a caption)
    async with MediaBot(api, srv, db_url, tmp_path) as bot:
        api.push_photo(41, jpeg(), user_id=41, caption="what is this?")
        texts = await bot.answered(41, 1)
        assert texts == ["It is a red square."]
        api.push_text(41, "and what colour was it?", user_id=41)
        await bot.answered(41, 2)
        turn, describe, later = srv.requests[:3]
        # The turn that showed it: exactly one image part, in the user message with the caption, about 1 MP.
        parts = image_parts(turn)
        assert len(parts) == 1
        user = turn["messages"][-1]
        assert user["role"] == "user" and user["content"][0] == {"type": "text", "text": "what is this?"}
        image = decoded(parts[0])
        assert image.format == "JPEG" and image.width * image.height <= MAX_PIXELS
        assert abs(image.width / image.height - 4 / 3) < 0.01
        assert "image" not in user and all("image" not in m for m in turn["messages"])
        # One small call described it (the answer to a caption is not a description).
        assert len(image_parts(describe)) == 1 and describe["max_tokens"] <= 200
        # Afterwards: words only.
        assert image_parts(later) == []
        history = [message_text(m) for m in later["messages"] if m["role"] == "user"]
        assert history == ["[image: A plain red square filling the frame.]\nwhat is this?", "and what colour was it?"]
        # The database never holds base64, and the message names the kept file.
        assert not any("base64" in c or "image_url" in c for c in await bot.raw_contents())
        stored = await bot.stored("telegram:41")
        assert stored[0]["image"]["description"] == "A plain red square filling the frame."
        kept = tmp_path / stored[0]["image"]["file"]
        assert kept.parent == tmp_path / "media" / "telegram_41"
        assert stat.S_IMODE(os.stat(kept).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(kept.parent).st_mode) == 0o700
        assert session_media_files(tmp_path, "telegram:41") == [kept]
        # The bot fetched the largest size Telegram offered, through the file URL.
        assert len(api.downloads) == 1 and api.downloads[0].startswith("photos/")
        # The context in memory holds the words too.
        state = bot.sessions.peek("telegram:41")
        assert state is not None and not any("image_url" in str(m.message) for m in state.messages)


async def test_a_photo_without_caption_takes_the_answer_as_its_description(api, srv, db_url, tmp_path):
    srv.enqueue_text("A red square on its own.")
    async with MediaBot(api, srv, db_url, tmp_path) as bot:
        api.push_photo(42, jpeg(), user_id=42)
        assert await bot.answered(42, 1) == ["A red square on its own."]
        assert len(srv.requests) == 1  # no description call
        assert srv.requests[0]["messages"][-1]["content"][0]["type"] == "image_url"  # no empty text part
        stored = await bot.stored("telegram:42")
        assert stored[0]["content"] == "[image: A red square on its own.]"


@pytest.mark.parametrize("server", ["openai", "llamacpp", "vllm"])
async def test_a_server_refusing_images_gets_a_text_answer_and_no_second_refusal(api, srv, db_url, tmp_path, server):
    srv.refuse_images = server
    async with MediaBot(api, srv, db_url, tmp_path, model="my-local-model") as bot:
        api.push_photo(43, jpeg(), user_id=43, caption="is this a cat?")
        texts = await bot.answered(43, 1)
        assert texts[0].startswith(REFUSED_NOTE) and "echo:" in texts[0] and "is this a cat?" in texts[0]
        api.push_photo(43, jpeg(color="blue"), user_id=43, caption="and this one?")
        await bot.answered(43, 2)
        with_image = [r for r in srv.requests if image_parts(r)]
        assert len(with_image) == 1  # the first turn's only: the refusal is remembered for the model
        assert bot.agent.vision.refused == {"my-local-model"}
        stored = await bot.stored("telegram:43")
        users = [m for m in stored if m["role"] == "user"]
        assert [m["content"] for m in users] == [f"[image: {NOT_SEEN}]\nis this a cat?", "and this one?"]
        assert api.chat_texts(43)[1] == f"{NO_VISION_CAPTION_NOTE}\n\necho: and this one?"
        assert not any("base64" in c for c in await bot.raw_contents())


async def test_without_vision_a_photo_gets_a_note_and_its_caption_an_answer(api, srv, db_url, tmp_path):
    async with MediaBot(api, srv, db_url, tmp_path, vision=False) as bot:
        api.push_photo(44, jpeg(), user_id=44)
        assert await bot.answered(44, 1) == [NO_VISION_ALONE]
        api.push_photo(44, jpeg(), user_id=44, caption="what do you think?")
        texts = await bot.answered(44, 2)
        assert texts[1] == f"{NO_VISION_CAPTION_NOTE}\n\necho: what do you think?"
        assert all(image_parts(r) == [] for r in srv.requests) and api.downloads == []
        assert not (tmp_path / "media").exists()


async def test_a_voice_note_becomes_a_stored_text_message_and_an_answer(api, srv, db_url, tmp_path):
    srv.default_transcript = "remind me what we said about the trip"
    async with MediaBot(api, srv, db_url, tmp_path) as bot:
        api.push_voice(45, OGG_VOICE, user_id=45)
        texts = await bot.answered(45, 1)
        assert texts == ['(heard: "remind me what we said about the trip")\n\n'
                         "echo: remind me what we said about the trip"]
        (call,) = srv.transcriptions
        assert call["model"] == "whisper-1" and call["audio"] == OGG_VOICE and call["filename"].endswith(".ogg")
        assert srv.paths[0].endswith("/v1/audio/transcriptions")
        stored = await bot.stored("telegram:45")
        assert stored[0] == {"role": "user", "content": "remind me what we said about the trip", "voice": True}
        assert "voice" not in srv.requests[0]["messages"][-1]
        # the transcription is on the bill (DESIGN 1.7): whisper-1 reports seconds, not tokens, so the
        # transcript's tokens are counted; the reply beside it
        rows = await bot.store.run(lambda conn: conn.execute(text(
            "SELECT session_id, user_id, model, purpose, prompt_tokens, completion_tokens FROM usage ORDER BY id"
        )).all())
        heard = TokenCounter("whisper-1").count_text("remind me what we said about the trip")
        assert [tuple(r) for r in rows][0] == ("telegram:45", "telegram:45", "whisper-1", "transcribe", 0, heard)
        assert [r.purpose for r in rows] == ["transcribe", "reply"]


async def test_a_long_transcript_is_not_echoed(api, srv, db_url, tmp_path):
    srv.default_transcript = "word " * 80
    async with MediaBot(api, srv, db_url, tmp_path) as bot:
        api.push_voice(46, OGG_VOICE, user_id=46)
        (text,) = await bot.answered(46, 1)
        assert text.startswith("echo: word word") and "heard" not in text


async def test_voice_off_or_failing_is_a_short_note(api, srv, db_url, tmp_path):
    async with MediaBot(api, srv, db_url, tmp_path, speech_to_text_model="") as bot:
        api.push_voice(47, OGG_VOICE, user_id=47)
        assert await bot.answered(47, 1) == [VOICE_OFF]
        assert srv.transcriptions == [] and srv.requests == []
        bot.config.replace(bot.config().model_copy(update={"speech_to_text_model": "whisper-1"}))
        srv.transcripts.append((400, {"error": {"message": "Invalid file format.", "type": "invalid_request_error",
                                                "param": None, "code": None}}))
        api.push_voice(47, OGG_VOICE, user_id=47)
        texts = await bot.answered(47, 2)
        assert texts[1] == VOICE_FAILED.format(why="the transcription service refused it")
        assert srv.requests == [] and await bot.stored("telegram:47") == []


async def test_forget_removes_the_image_files(api, srv, db_url, tmp_path):
    async with MediaBot(api, srv, db_url, tmp_path) as bot:
        api.push_photo(48, jpeg(), user_id=48)
        await bot.answered(48, 1)
        api.push_photo(49, jpeg(), user_id=49)
        await bot.answered(49, 1)
        folder = tmp_path / "media" / "telegram_48"
        assert len(list(folder.iterdir())) == 1
        report = await forget_session(bot.store, DailyMemory(Path(tmp_path) / "memory", bot.config().zone()),
                                      "telegram:48")
        assert report.images == 1 and "1 image file" in report.describe()
        assert not folder.exists()
        assert len(session_media_files(tmp_path, "telegram:49")) == 1  # another chat's photo stays


async def test_a_group_photo_triggers_by_its_caption_only(api, srv, db_url, tmp_path):
    srv.enqueue_text("A red square, Alice.")
    srv.enqueue_text("A red square.")
    async with MediaBot(api, srv, db_url, tmp_path) as bot:
        api.push_photo(-500, jpeg(), user_id=50, chat_type="group", caption="nice, right?")
        api.push_photo(-500, jpeg(), user_id=50, chat_type="group", first_name="Alice",
                       caption=f"@{api.username} what is it?")
        texts = await bot.answered(-500, 1)
        assert texts == ["A red square, Alice."]
        user = srv.requests[0]["messages"][-1]
        assert user["content"][0]["text"].endswith("[Alice] what is it?")
        assert len(api.downloads) == 1  # the untriggered photo was never fetched


async def test_the_described_photo_is_found_by_history_search(api, srv, db_url, tmp_path):
    srv.enqueue_text("Lovely.")
    srv.enqueue_text("a lighthouse on a rocky coast at dusk")
    async with MediaBot(api, srv, db_url, tmp_path) as bot:
        api.push_photo(51, jpeg(), user_id=51, caption="from my trip")
        await bot.answered(51, 1)
        hits = await bot.store.sessions.search_history("telegram:51", "lighthouse", 10)
        assert [h.seq for h in hits] == [1]


async def test_a_photo_that_cannot_be_fetched_gets_a_note_and_nothing_is_stored(api, srv, db_url, tmp_path):
    async with MediaBot(api, srv, db_url, tmp_path) as bot:
        api.fail_next("getFile", 400, "Bad Request: file is too big")
        api.push_photo(52, jpeg(), user_id=52, caption="look")
        assert await bot.answered(52, 1) == [PHOTO_FAILED.format(why="the download failed")]
        api.push_photo(52, b"<html>not a photo</html>", user_id=52)
        texts = await bot.answered(52, 2)
        assert texts[1] == PHOTO_FAILED.format(why="it is not an image I can read")
        assert srv.requests == [] and await bot.stored("telegram:52") == []


async def test_a_model_the_table_says_cannot_see_gets_no_image(api, srv, db_url, tmp_path):
    async with MediaBot(api, srv, db_url, tmp_path, model="deepseek-chat") as bot:
        api.push_photo(53, jpeg(), user_id=53, caption="what is it?")
        texts = await bot.answered(53, 1)
        assert texts == [f"{NO_VISION_CAPTION_NOTE}\n\necho: what is it?"]
        assert api.downloads == [] and image_parts(srv.requests[0]) == []


async def test_over_a_cap_a_voice_note_is_refused_before_it_is_fetched_or_transcribed(api, srv, db_url, tmp_path):
    """The cap is asked before the download and the transcription (which would be spent, and counted, for
    nothing); with a fallback model the note is transcribed and answered on it."""
    srv.default_transcript = "what is on today?"
    async with MediaBot(api, srv, db_url, tmp_path, usage_cap_user_daily_tokens=10) as bot:
        api.push_text(46, "hello", user_id=46)
        await bot.answered(46, 1)  # spends more than 10 tokens
        fetched = len(api.downloads)
        api.push_voice(46, OGG_VOICE, user_id=46)
        texts = await bot.answered(46, 2)
        assert texts[1].startswith("You have used your daily limit of 10 tokens; it resets at midnight")
        assert srv.transcriptions == []
        assert len(api.downloads) == fetched  # not even downloaded
        purposes = await bot.store.run(lambda conn: [r[0] for r in conn.execute(text(
            "SELECT purpose FROM usage ORDER BY id"))])
        assert purposes == ["reply"]
        bot.config.replace(bot.config().model_copy(update={"usage_fallback_model": "cheap-model"}))
        api.push_voice(46, OGG_VOICE, user_id=46)
        texts = await bot.answered(46, 3)
        assert texts[2] == '(heard: "what is on today?")\n\necho: what is on today?'
        assert len(srv.transcriptions) == 1 and srv.requests[-1]["model"] == "cheap-model"
