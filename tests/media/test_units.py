"""The parts of photos and voice notes (DESIGN §5.1): files, token rates, the vision table, the servers'
refusals, the request's image part, cleanup of the image folders, and when a photo triggers the bot."""

from __future__ import annotations

import io
import os
from datetime import UTC, datetime, timedelta

import pytest
from PIL import Image

from agent.images import FILE_GONE, NOT_SHOWN, described, pending, request_messages, table_vision, without_images
from agent.provider_errors import classify
from agent.tokens import TokenCounter
from config.settings import Config, ConfigHolder
from core.errors import ImagesUnsupportedError, TransientLLMError
from core.messages import IncomingMessage
from core.records import SessionInfo
from dispatcher.intake import evaluate
from media.files import (
    MAX_PIXELS,
    ImageError,
    delete_session_media,
    image_tokens,
    read_image,
    resize_to_jpeg,
    save_image,
    session_media_files,
    sweep_media,
)
from store.retention import CleanupJob
from tests.fakes.openai_server import IMAGE_REFUSALS
from tests.media.harness import jpeg


def png_with_alpha() -> bytes:
    out = io.BytesIO()
    Image.new("RGBA", (300, 200), (0, 0, 255, 0)).save(out, "PNG")
    return out.getvalue()


def rotated_jpeg() -> bytes:
    """A 1600 x 1200 photo whose EXIF says "rotate 90° clockwise to view" (orientation 6), as phones save them."""
    image = Image.new("RGB", (1600, 1200), "green")
    exif = image.getexif()
    exif[0x0112] = 6
    out = io.BytesIO()
    image.save(out, "JPEG", exif=exif.tobytes())
    return out.getvalue()


@pytest.mark.parametrize(("size", "tokens"), [
    ((1154, 866), 765),  # a one-megapixel 4:3 photo: four tiles
    ((1000, 1000), 765),
    ((512, 512), 255),  # one tile
    ((4000, 500), 765),  # a panorama: fitted to 2048 wide, 4 tiles in a row
    ((577, 1732), 1445),  # a tall one-megapixel photo: its short side is under 768, 2 x 4 tiles
])
def test_images_count_at_openais_tile_rate(size, tokens):
    assert image_tokens(*size) == tokens


def test_a_photo_is_made_about_one_megapixel_jpeg_upright():
    data, width, height = resize_to_jpeg(jpeg(4000, 3000))
    assert width * height <= MAX_PIXELS and width * height > 0.95 * MAX_PIXELS
    assert Image.open(io.BytesIO(data)).format == "JPEG"
    _, width, height = resize_to_jpeg(rotated_jpeg())
    assert width < height  # turned upright as the phone meant it
    data, width, height = resize_to_jpeg(png_with_alpha())
    image = Image.open(io.BytesIO(data))
    assert (width, height) == (300, 200) and image.mode == "RGB"
    assert image.getpixel((150, 100))[0] > 240  # transparency became white, not black
    with pytest.raises(ImageError):
        resize_to_jpeg(b"GIF89a not really")


def test_files_are_owner_only_and_paths_stay_inside_the_media_folder(tmp_path):
    saved = save_image(tmp_path, "telegram:group:-5:7", jpeg(), "photo")
    path = tmp_path / saved.file
    assert path.parent.name == "telegram_group_-5_7" and oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert read_image(tmp_path, saved.file) == path.read_bytes()
    (tmp_path / "secret.txt").write_text("no")
    assert read_image(tmp_path, "media/../secret.txt") is None
    assert session_media_files(tmp_path, "telegram:group:-5:7") == [path]
    assert delete_session_media(tmp_path, "telegram:group:-5:7") == 1 and not path.parent.exists()


def test_the_vision_table():
    assert table_vision("gpt-4o-mini") is True and table_vision("gpt-4.1-nano") is True
    assert table_vision("gpt-3.5-turbo") is False and table_vision("deepseek-chat") is False
    assert table_vision("o3-mini") is False and table_vision("o3") is True
    assert table_vision("qwen2.5-vl-7b-instruct") is True and table_vision("qwen2.5-7b-instruct") is False
    assert table_vision("llama3.2-vision:11b") is True and table_vision("my-local-model") is None
    assert table_vision("openrouter/anthropic/claude-sonnet-4") is True


@pytest.mark.parametrize("server", sorted(IMAGE_REFUSALS))
def test_the_servers_refusals_are_recognised(server):
    status, body = IMAGE_REFUSALS[server]
    error = classify(status, body)
    assert isinstance(error, ImagesUnsupportedError)
    assert not isinstance(error, TransientLLMError)  # llama.cpp's 500 is not retried three times


def message(text: str, *, file: str = "media/x/a.jpg", description: str | None = None) -> dict:
    image = {"file": file, "width": 10, "height": 10, "tokens": 765, "caption": bool(text)}
    if description is not None:
        image["description"] = description
    return {"role": "user", "content": text, "image": image}


def test_only_the_current_turns_pending_image_becomes_an_image_part(tmp_path):
    saved = save_image(tmp_path, "t:1", jpeg(400, 300), "photo")
    old = message("old one", file=saved.file)  # a turn that failed before its photo was described
    done = described(message("seen", file=saved.file), "a red square")
    current = message("", file=saved.file)
    history = [{"role": "system", "content": "s"}, old, {"role": "assistant", "content": "?"}, done,
               {"role": "assistant", "content": "ok"}, current]
    out, sent = request_messages(history, tmp_path, True)
    assert sent and [m.get("image") for m in out] == [None] * 6 and "voice" not in str(out)
    assert out[1]["content"] == "[image]\nold one"
    assert out[3]["content"] == "[image: a red square]\nseen"
    assert [p["type"] for p in out[5]["content"]] == ["image_url"]
    assert without_images(out)[5]["content"] == NOT_SHOWN
    out, sent = request_messages(history, tmp_path, False)
    assert not sent and out[5]["content"] == NOT_SHOWN
    gone = [message("where is it?", file="media/t_1/gone.jpg")]
    out, sent = request_messages(gone, tmp_path, True)
    assert not sent and out[0]["content"] == f"{FILE_GONE}\nwhere is it?"


def test_a_pending_image_counts_at_its_rate_and_words_after():
    counter = TokenCounter("gpt-4o")
    waiting = message("hi")
    assert pending(waiting) and counter.count_message(waiting) >= 765
    words = described(waiting, "a cat")
    assert not pending(words) and counter.count_message(words) < 20
    assert words["content"] == "[image: a cat]\nhi"


async def test_cleanup_deletes_the_image_folders_of_deleted_sessions(store, tmp_path):
    holder = ConfigHolder(Config(data_dir=str(tmp_path), conversation_max_age_days=30))
    for sid in ("telegram:1", "telegram:2"):
        await store.sessions.ensure(SessionInfo(session_id=sid, channel="telegram", chat_id=sid[-1]))
        save_image(tmp_path, sid, jpeg(200, 100), "photo")
    job = CleanupJob(store, holder, sweep_media=lambda: sweep_media(store, tmp_path))
    stats = await job.run_once(datetime.now(UTC))
    assert stats.images == 0 and len(session_media_files(tmp_path, "telegram:1")) == 1
    stats = await job.run_once(datetime.now(UTC) + timedelta(days=31))
    assert stats.sessions == 2 and stats.images == 2
    assert not (tmp_path / "media" / "telegram_1").exists() and not (tmp_path / "media" / "telegram_2").exists()


def incoming(kind: str, text: str = "", **kw) -> IncomingMessage:
    return IncomingMessage(channel="telegram", chat_id=kw.pop("chat_id", "5"), user_id="5", text=text,
                           user_name="Ann", content_type=kind, **kw)


def test_when_a_photo_or_voice_note_triggers_the_bot():
    cfg = Config()
    assert evaluate(incoming("photo", "look"), cfg, "bot").text == "look"
    assert evaluate(incoming("photo"), cfg, "bot").act
    assert evaluate(incoming("voice"), cfg, "bot").act
    group = {"is_group": True, "chat_id": "-9", "group_name": "g"}
    assert not evaluate(incoming("photo", "nice", **group), cfg, "bot").act
    assert evaluate(incoming("photo", "@bot what is it", mentions_bot=True, **group), cfg, "bot").text == \
        "[Ann] what is it"
    assert evaluate(incoming("voice", reply_to_bot=True, **group), cfg, "bot").act
    assert not evaluate(incoming("voice", **group), cfg, "bot").act
    assert not evaluate(incoming("sticker", **group), cfg, "bot").act
