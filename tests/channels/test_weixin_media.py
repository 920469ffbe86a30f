"""WeChat photos and voice messages at the channel (DESIGN §5.1): what an iLink message's media reference becomes,
the AES keys in the forms WeChat sends them, and fetching from the fake CDN (tests/fakes/ilink_server.py)."""

from __future__ import annotations

import base64
import json
import secrets

import pytest

from channels.weixin import channel as weixin_channel
from channels.weixin.client import (
    CDN_BASE_URL,
    ILinkHTTPError,
    cdn_download_url,
    decrypt_file,
    encrypt_file,
    media_key,
)
from channels.weixin.incoming import to_incoming
from core.messages import IncomingMessage
from tests.channels.test_weixin import USER, Bot, logged_in, until
from tests.media.harness import jpeg

BASE = {"message_id": 42, "from_user_id": USER, "create_time_ms": 1_700_000_000_000, "message_type": 1,
        "context_token": "ctx"}


async def next_message(bot: Bot, n: int) -> IncomingMessage:
    """The ``n``-th message the channel handed over (waits for it)."""
    await until(lambda: len(bot.received) >= n)
    return bot.received[n - 1]


def test_a_photo_and_a_voice_message_keep_what_fetching_them_needs():
    media = {"encrypt_query_param": "p==", "aes_key": "a2V5", "encrypt_type": 1, "full_url": "https://cdn/x"}
    photo = to_incoming({**BASE, "item_list": [{"type": 2, "image_item": {"media": media, "aeskey": "ab" * 16}}]})
    assert (photo.content_type, photo.text) == ("photo", "")
    assert photo.extra == {"context_token": "ctx", "aeskey": "ab" * 16,
                           "media": {"encrypt_query_param": "p==", "aes_key": "a2V5", "full_url": "https://cdn/x"}}
    # text beside a photo is its caption
    captioned = to_incoming({**BASE, "item_list": [{"type": 1, "text_item": {"text": "what is it?"}},
                                                   {"type": 2, "image_item": {"media": media}}]})
    assert (captioned.content_type, captioned.text) == ("photo", "what is it?")
    voice = to_incoming({**BASE, "item_list": [{"type": 3, "voice_item": {
        "media": media, "encode_type": 6, "text": " 明天下午开会 ", "playtime": 2300}}]})
    assert voice.content_type == "voice"
    assert (voice.extra["transcript"], voice.extra["audio_format"]) == ("明天下午开会", "silk")
    mp3 = to_incoming({**BASE, "item_list": [{"type": 3, "voice_item": {"media": media, "encode_type": 7}}]})
    assert (mp3.extra["transcript"], mp3.extra["audio_format"]) == ("", "mp3")
    # a reference without a download parameter cannot be fetched: still a photo (its download fails: a note)
    bare = to_incoming({**BASE, "item_list": [{"type": 2, "image_item": {"media": {"aes_key": "a2V5"}}}]})
    assert bare.content_type == "photo" and "media" not in bare.extra
    bare_voice = to_incoming({**BASE, "item_list": [{"type": 3, "voice_item": {}}]})
    assert bare_voice.extra == {"context_token": "ctx", "media": {}, "transcript": "", "audio_format": "silk"}
    # the extras survive the journal (JSON) as they are
    assert IncomingMessage.from_json(json.loads(json.dumps(voice.to_json()))).extra == voice.extra


def test_aes_keys_in_each_form_wechat_sends_them():
    key = secrets.token_bytes(16)
    assert media_key({}, key.hex()) == key  # an image item's own aeskey
    assert media_key({"aes_key": base64.b64encode(key).decode()}) == key  # base64 of the bytes (images)
    assert media_key({"aes_key": base64.b64encode(key.hex().encode()).decode()}) == key  # of the hex (files, voice)
    assert media_key({"aes_key": base64.b64encode(key).decode()}, "not hex at all, 32 characters!!") == key
    for bad in ({}, {"aes_key": "%%%"}, {"aes_key": base64.b64encode(b"short").decode()}):
        with pytest.raises(ValueError, match="no usable AES key"):
            media_key(bad)


def test_decrypt_is_the_inverse_of_the_upload_encryption_and_refuses_garbage():
    key, data = secrets.token_bytes(16), secrets.token_bytes(1000)
    assert decrypt_file(encrypt_file(data, key), key) == data
    assert decrypt_file(encrypt_file(b"", key), key) == b""
    with pytest.raises(ValueError):
        decrypt_file(b"12345", key)
    # The wrong key: bad padding. A fixed key and text, as a random pair decrypts to valid padding about one
    # time in 300 (the last byte 0x01, say), which made this test flaky.
    fixed_key, fixed_data = bytes(range(16)), bytes(range(256)) * 4
    with pytest.raises(ValueError):
        decrypt_file(encrypt_file(fixed_data, fixed_key), bytes(range(16, 32)))


def test_the_download_address_is_the_full_url_or_the_cdn_with_the_parameter():
    assert cdn_download_url({"full_url": "https://x/y?z=1", "encrypt_query_param": "p"}) == "https://x/y?z=1"
    assert cdn_download_url({"encrypt_query_param": "a+b/c=="}) == (
        f"{CDN_BASE_URL}/download?encrypted_query_param=a%2Bb%2Fc%3D%3D")
    with pytest.raises(ValueError):
        cdn_download_url({})


@pytest.mark.parametrize(("key_as", "full_url"), [("raw", True), ("item", True), ("hex", False)])
async def test_a_photo_is_fetched_from_the_cdn_and_decrypted(api, tmp_path, key_as, full_url):
    bot = await logged_in(api, tmp_path)
    channel = bot.channel
    try:
        channel.cdn_base_url = f"{api.base_url}/c2c"  # no full_url: the CDN's own address (here the fake's)
        picture = jpeg(640, 480)
        api.push_image(USER, picture, key_as=key_as, full_url=full_url)
        msg = await next_message(bot, 1)
        assert msg.content_type == "photo"
        assert await channel.download(msg) == picture
        assert list(api.cdn.fetches.values()) == [1]
    finally:
        await channel.stop()


async def test_an_unknown_file_or_one_too_big_fails_and_nothing_else_does(api, tmp_path, monkeypatch):
    bot = await logged_in(api, tmp_path)
    channel = bot.channel
    try:
        api.push_image(USER, jpeg(64, 64))
        msg = await next_message(bot, 1)
        monkeypatch.setattr(weixin_channel, "MAX_MEDIA_BYTES", 100)
        with pytest.raises(ValueError, match="at most 100"):
            await channel.download(msg)
        monkeypatch.undo()
        api.cdn.kept.clear()  # the CDN no longer has it
        with pytest.raises(ILinkHTTPError) as failed:
            await channel.download(msg)
        assert failed.value.status == 400
        bare = to_incoming({**BASE, "item_list": [{"type": 2, "image_item": {}}]})
        with pytest.raises(ValueError, match="no usable reference"):
            await channel.download(bare)
        api.push_text(USER, "still here")
        assert (await next_message(bot, 2)).text == "still here"
    finally:
        await channel.stop()
