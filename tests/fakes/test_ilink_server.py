"""The fake iLink server itself: it must hold clients to the protocol, or the channel's tests prove nothing."""

from __future__ import annotations

import base64
import json

import aiohttp
import pytest

from tests.fakes.ilink_server import FakeILink, decode_cursor, encode_cursor


@pytest.fixture
def api():
    with FakeILink(hold_s=0.3, qr_hold_s=0.3) as server:
        yield server


def headers(token: str, **changes: str) -> dict[str, str]:
    good = {"Content-Type": "application/json", "AuthorizationType": "ilink_bot_token",
            "Authorization": f"Bearer {token}", "X-WECHAT-UIN": base64.b64encode(b"123456789").decode()}
    good.update(changes)
    return {k: v for k, v in good.items() if v}


async def log_in(session: aiohttp.ClientSession, api: FakeILink) -> str:
    async with session.get(f"{api.base_url}/ilink/bot/get_bot_qrcode", params={"bot_type": "3"}) as r:
        code = await r.json()
    assert set(code) >= {"qrcode", "qrcode_img_content"}
    api.set_qr("confirmed")
    async with session.get(f"{api.base_url}/ilink/bot/get_qrcode_status", params={"qrcode": code["qrcode"]}) as r:
        status = await r.json()
    assert status["status"] == "confirmed" and status["ilink_bot_id"] == api.bot_id
    assert status["baseurl"] == api.base_url
    return status["bot_token"]


async def post(session, api, path, body, hdrs):
    async with session.post(f"{api.base_url}/ilink/bot/{path}", data=json.dumps(body), headers=hdrs) as r:
        return r.status, await r.json()


async def test_qr_status_moves_wait_scanned_expired(api):
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{api.base_url}/ilink/bot/get_bot_qrcode", params={"bot_type": "3"}) as r:
            qrcode = (await r.json())["qrcode"]
        seen = []
        for status in ("wait", "scaned", "expired"):
            if status != "wait":
                api.set_qr(status)
            async with s.get(f"{api.base_url}/ilink/bot/get_qrcode_status", params={"qrcode": qrcode}) as r:
                seen.append((await r.json())["status"])
        assert seen == ["wait", "scaned", "expired"]
        assert api.violations == []


async def test_bot_calls_need_the_protocol_headers(api):
    async with aiohttp.ClientSession() as s:
        token = await log_in(s, api)
        body = {"get_updates_buf": "", "base_info": {"channel_version": "1.0.0"}}
        for bad in (headers(token, AuthorizationType=""), headers(token, Authorization=""),
                    headers(token, **{"X-WECHAT-UIN": "not base64!"}),
                    headers(token, **{"X-WECHAT-UIN": base64.b64encode(b"99999999999").decode()}),
                    headers("never-issued")):
            status, _ = await post(s, api, "getupdates", body, bad)
            assert status == 400
        assert len(api.violations) == 5
        status, _ = await post(s, api, "getupdates", {"get_updates_buf": ""}, headers(token))
        assert status == 400 and "base_info" in api.violations[-1]
        status, answer = await post(s, api, "getupdates", body, headers(token))
        assert status == 200 and answer["ret"] == 0


async def test_cursor_confirms_and_an_old_cursor_redelivers(api):
    async with aiohttp.ClientSession() as s:
        token = await log_in(s, api)
        api.push_text("u@im.wechat", "one")
        api.push_text("u@im.wechat", "two")
        base = {"base_info": {"channel_version": "1.0.0"}}
        _, first = await post(s, api, "getupdates", {"get_updates_buf": "", **base}, headers(token))
        assert [m["item_list"][0]["text_item"]["text"] for m in first["msgs"]] == ["one", "two"]
        assert first["longpolling_timeout_ms"] == 300
        _, empty = await post(s, api, "getupdates", {"get_updates_buf": first["get_updates_buf"], **base},
                              headers(token))
        assert empty["msgs"] == [] and empty["get_updates_buf"] == first["get_updates_buf"]
        # the old cursor (a crash before it was saved) gets the batch again
        _, again = await post(s, api, "getupdates", {"get_updates_buf": "", **base}, headers(token))
        assert again["msgs"] == []  # "" starts after what a cursor confirmed
        _, replay = await post(s, api, "getupdates", {"get_updates_buf": encode_cursor(1), **base}, headers(token))
        assert [m["item_list"][0]["text_item"]["text"] for m in replay["msgs"]] == ["two"]
        assert api.deliveries == {str(first["msgs"][0]["message_id"]): 1, str(first["msgs"][1]["message_id"]): 2}
        assert decode_cursor("garbage") is None


async def test_sendmessage_checks_context_token_client_id_and_length(api):
    async with aiohttp.ClientSession() as s:
        token = await log_in(s, api)
        api.push_text("u@im.wechat", "hi")
        base = {"base_info": {"channel_version": "1.0.0"}}
        _, got = await post(s, api, "getupdates", {"get_updates_buf": "", **base}, headers(token))
        ctx = got["msgs"][0]["context_token"]

        def msg(text, client_id, context_token=ctx):
            return {"msg": {"from_user_id": "", "to_user_id": "u@im.wechat", "client_id": client_id,
                            "message_type": 2, "message_state": 2, "context_token": context_token,
                            "item_list": [{"type": 1, "text_item": {"text": text}}]}, **base}

        assert await post(s, api, "sendmessage", msg("ok", "c1"), headers(token)) == (200, {"ret": 0})
        assert (await post(s, api, "sendmessage", msg("again", "c1"), headers(token)))[0] == 400
        assert (await post(s, api, "sendmessage", msg("x", "c2", "ctx-forged"), headers(token)))[0] == 400
        assert await post(s, api, "sendmessage", msg("y" * 4001, "c3"), headers(token)) == (
            200, {"ret": -2, "errmsg": "prepare failed"})
        assert (await post(s, api, "sendmessage", msg("y" * 4000, "c4"), headers(token)))[0] == 200
        assert api.sent_to("u@im.wechat") == ["ok", "y" * 4000]
        assert len(api.violations) == 2
        assert [why for *_, why in api.refused] == ["too long"]


async def test_a_context_token_allows_ten_replies_within_a_day(api):
    async with aiohttp.ClientSession() as s:
        token = await log_in(s, api)
        api.push_text("u@im.wechat", "hi")
        ctx = next(iter(api.context_tokens))
        base = {"base_info": {"channel_version": "1.0.0"}}

        def msg(n):
            return {"msg": {"from_user_id": "", "to_user_id": "u@im.wechat", "client_id": f"c{n}",
                            "message_type": 2, "message_state": 2, "context_token": ctx,
                            "item_list": [{"type": 1, "text_item": {"text": f"reply {n}"}}]}, **base}

        answers = [(await post(s, api, "sendmessage", msg(n), headers(token)))[1] for n in range(11)]
        assert answers == [{"ret": 0}] * 10 + [{"ret": -2}]
        api.push_text("u@im.wechat", "again")
        ctx = list(api.context_tokens)[-1]
        api.age_tokens(24 * 3600 + 1)
        answer = (await post(s, api, "sendmessage", msg(11), headers(token)))[1]
        assert answer == {"ret": -2, "errmsg": "prepare failed"}
        assert [why for *_, why in api.refused] == ["token used up", "token expired"]


async def test_the_qr_code_is_asked_for_by_post_with_the_local_tokens_or_by_get_on_an_older_server(api):
    async with aiohttp.ClientSession() as s:
        url = f"{api.base_url}/ilink/bot/get_bot_qrcode"
        async with s.post(url, params={"bot_type": "3"}, json={"local_token_list": ["t1"]},
                          headers=headers("", Authorization="")) as r:
            assert r.status == 200 and set(await r.json()) >= {"qrcode", "qrcode_img_content"}
        async with s.post(url, params={"bot_type": "3"}, json={"local_token_list": "t1"},
                          headers=headers("", Authorization="")) as r:
            assert r.status == 400
        api.post_qrcode = False
        async with s.post(url, params={"bot_type": "3"}, json={"local_token_list": []},
                          headers=headers("", Authorization="")) as r:
            assert r.status == 404
        async with s.get(url, params={"bot_type": "3"}) as r:
            assert r.status == 200
    assert api.qr_requests == [("POST", ["t1"]), ("GET", None)]
    assert len(api.codes) == 2


async def test_a_verify_code_moves_the_login_on_and_three_wrong_ones_block_it(api):
    async with aiohttp.ClientSession() as s:
        status_url = f"{api.base_url}/ilink/bot/get_qrcode_status"
        for right in (True, False):
            async with s.get(f"{api.base_url}/ilink/bot/get_bot_qrcode", params={"bot_type": "3"}) as r:
                qrcode = (await r.json())["qrcode"]
            api.set_qr("need_verifycode", verify="1234")
            seen = []
            for given in (["0000", "1234"] if right else ["1", "2", "3"]):
                async with s.get(status_url, params={"qrcode": qrcode}) as r:
                    seen.append((await r.json())["status"])
                async with s.get(status_url, params={"qrcode": qrcode, "verify_code": given}) as r:
                    seen.append((await r.json())["status"])
            if right:
                assert seen == ["need_verifycode", "need_verifycode", "need_verifycode", "scaned"]
            else:
                assert seen[-1] == "verify_code_blocked" and seen[:4] == ["need_verifycode"] * 4
        assert api.codes[0].codes_given == ["0000", "1234"]


async def test_scaned_but_redirect_names_the_other_port_and_a_login_without_bot_id(api):
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{api.base_url}/ilink/bot/get_bot_qrcode", params={"bot_type": "3"}) as r:
            qrcode = (await r.json())["qrcode"]
        api.set_qr("scaned_but_redirect")
        async with s.get(f"{api.base_url}/ilink/bot/get_qrcode_status", params={"qrcode": qrcode}) as r:
            host = (await r.json())["redirect_host"]
        assert host == f"127.0.0.1:{api.idc_port}" and api.idc_port != api.port
        api.set_qr("confirmed", without_bot_id=True)
        async with s.get(f"http://{host}/ilink/bot/get_qrcode_status", params={"qrcode": qrcode}) as r:
            answer = await r.json()
        assert answer["status"] == "confirmed" and answer["bot_token"] and "ilink_bot_id" not in answer
        assert api.status_ports == [api.port, api.idc_port]


async def test_notifystart_and_notifystop_are_bot_calls(api):
    async with aiohttp.ClientSession() as s:
        token = await log_in(s, api)
        base = {"base_info": {"channel_version": "1.0.0"}}
        for event in ("notifystart", "notifystop"):
            async with s.post(f"{api.base_url}/ilink/bot/msg/{event}", data=json.dumps(base),
                              headers=headers(token)) as r:
                assert (r.status, await r.json()) == (200, {"ret": 0})
        async with s.post(f"{api.base_url}/ilink/bot/msg/notifystart", data=json.dumps({}),
                          headers=headers(token)) as r:
            assert r.status == 400
    assert api.notified == ["notifystart", "notifystop"]


async def test_an_ended_session_answers_errcode_minus_14(api):
    async with aiohttp.ClientSession() as s:
        token = await log_in(s, api)
        api.end_session()
        status, answer = await post(s, api, "getupdates",
                                    {"get_updates_buf": "", "base_info": {"channel_version": "1.0.0"}},
                                    headers(token))
        assert status == 200 and answer == {"ret": -14, "errcode": -14, "errmsg": "session timeout"}


async def test_typing_needs_the_ticket_from_getconfig(api):
    async with aiohttp.ClientSession() as s:
        token = await log_in(s, api)
        base = {"base_info": {"channel_version": "1.0.0"}}
        _, config = await post(s, api, "getconfig", {"ilink_user_id": "u@im.wechat", **base}, headers(token))
        ticket = config["typing_ticket"]
        body = {"ilink_user_id": "u@im.wechat", "typing_ticket": ticket, "status": 1, **base}
        assert (await post(s, api, "sendtyping", body, headers(token)))[0] == 200
        assert (await post(s, api, "sendtyping", {**body, "typing_ticket": "x"}, headers(token)))[0] == 400
        assert api.typing == [("u@im.wechat", 1)]


async def test_a_file_goes_through_getuploadurl_the_cdn_and_a_file_item(api):
    from channels.weixin.client import ILinkClient, cdn_upload_url, encrypt_file

    # FIPS-197's AES-128 example, then one block of PKCS#7 padding
    key = bytes(range(16))
    encrypted = encrypt_file(bytes.fromhex("00112233445566778899aabbccddeeff"), key)
    assert encrypted[:16].hex() == "69c4e0d86a7b0430d8cdb78070b4c55a" and len(encrypted) == 32
    assert cdn_upload_url("a+b/c=", "00ff") == ("https://novac2c.cdn.weixin.qq.com/c2c/upload?"
                                                "encrypted_query_param=a%2Bb%2Fc%3D&filekey=00ff")
    async with aiohttp.ClientSession() as s:
        client = ILinkClient(s, api.base_url, await log_in(s, api))
        api.push_text("alice@im.wechat", "/export")
        token = next(t for t, user in api.context_tokens.items() if user == "alice@im.wechat")
        data = b"PK\x03\x04" + bytes(range(256)) * 40
        await client.send_file("alice@im.wechat", "export.zip", data, token)
    assert api.violations == []
    [sent] = api.files
    assert (sent["to"], sent["file_name"], sent["data"]) == ("alice@im.wechat", "export.zip", data)
    assert ("POST", "/c2c/upload") in api.requests


async def test_a_file_item_must_refer_to_an_upload(api):
    async with aiohttp.ClientSession() as s:
        token = await log_in(s, api)
        api.push_text("alice@im.wechat", "hi")
        ctx = next(iter(api.context_tokens))
        msg = {"from_user_id": "", "to_user_id": "alice@im.wechat", "client_id": "c1", "message_type": 2,
               "message_state": 2, "context_token": ctx,
               "item_list": [{"type": 4, "file_item": {"media": {"encrypt_query_param": "nope", "aes_key": "x",
                                                                 "encrypt_type": 1}, "file_name": "a", "len": "1"}}]}
        status, _ = await post(s, api, "sendmessage", {"msg": msg, "base_info": {}}, headers(token))
        assert status == 400 and "no uploaded file's" in api.violations[-1]
        status, _ = await post(s, api, "getuploadurl", {"filekey": "x", "base_info": {}}, headers(token))
        assert status == 400 and api.violations[-1].startswith("getuploadurl: filekey and aeskey")
    assert api.files == []
