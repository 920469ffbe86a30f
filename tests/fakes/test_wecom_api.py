"""The fake WeCom API and callback sender agree with WeCom's documents, and with wechatpy's reading of them."""

from __future__ import annotations

import base64

import httpx
import pytest
import xmltodict
from wechatpy.enterprise.crypto import WeChatCrypto
from wechatpy.exceptions import InvalidSignatureException

from tests.fakes.wecom_api import (
    TEXT_LIMIT,
    CallbackSender,
    FakeWecomAPI,
    decrypt,
    encrypt,
    new_aes_key,
    signature,
    text_message,
)

CORP, AGENT, TOKEN = "ww0123456789abcdef", "1000002", "callback-token"


def test_the_callback_encryption_is_what_wechatpy_decrypts_and_signs():
    key = new_aes_key()
    assert len(key) == 43
    sender = CallbackSender("http://127.0.0.1:1/wecom/callback", TOKEN, key, CORP, AGENT)
    inner = text_message(corp_id=CORP, agent_id=AGENT, user_id="zhangsan", content="你好 ]]> <b>", msg_id="42")
    query, body = sender.signed(inner)
    crypto = WeChatCrypto(TOKEN, key, CORP)
    plain = crypto.decrypt_message(body, query["msg_signature"], query["timestamp"], query["nonce"])
    data = xmltodict.parse(plain)["xml"]
    assert (data["FromUserName"], data["Content"], data["MsgId"], data["MsgType"]) == ("zhangsan", "你好 ]]> <b>", "42",
                                                                                       "text")
    bad_query, bad_body = sender.signed(inner, wrong_signature=True)
    with pytest.raises(InvalidSignatureException):
        crypto.decrypt_message(bad_body, bad_query["msg_signature"], bad_query["timestamp"], bad_query["nonce"])
    # and the other way round: what wechatpy encrypts, the fake's reading decrypts
    reply = crypto.encrypt_message("<xml><Content>ok</Content></xml>", "nonce1", "1700000000")
    outer = xmltodict.parse(reply)["xml"]
    assert outer["MsgSignature"] == signature(TOKEN, "1700000000", "nonce1", outer["Encrypt"])
    assert decrypt(key, outer["Encrypt"]) == ("<xml><Content>ok</Content></xml>", CORP)


def test_encrypt_pads_to_32_byte_blocks_and_round_trips():
    key = new_aes_key()
    for n in (0, 1, 11, 12, 31, 32, 1000):
        value = encrypt(key, CORP, "x" * n)
        assert len(base64.b64decode(value)) % 32 == 0
        assert decrypt(key, value) == ("x" * n, CORP)


def test_the_api_gives_tokens_and_refuses_a_wrong_secret_or_corp_id():
    with FakeWecomAPI(corp_id=CORP, agent_id=AGENT, secret="s3cret") as api:
        wrong = httpx.get(api.base_url + "/cgi-bin/gettoken", params={"corpid": CORP, "corpsecret": "nope"}).json()
        assert wrong["errcode"] == 40001 and "invalid credential" in wrong["errmsg"]
        assert httpx.get(api.base_url + "/cgi-bin/gettoken",
                         params={"corpid": "ww-other", "corpsecret": "s3cret"}).json()["errcode"] == 40013
        got = httpx.get(api.base_url + "/cgi-bin/gettoken", params={"corpid": CORP, "corpsecret": "s3cret"}).json()
        assert got["errcode"] == 0 and got["expires_in"] == 7200 and api.tokens_issued == 1
        token = got["access_token"]
        agent = httpx.get(api.base_url + "/cgi-bin/agent/get", params={"access_token": token, "agentid": AGENT}).json()
        assert agent["errcode"] == 0 and agent["agentid"] == int(AGENT)
        assert httpx.get(api.base_url + "/cgi-bin/agent/get",
                         params={"access_token": "forged", "agentid": AGENT}).json()["errcode"] == 40014
        api.expire_tokens()
        assert httpx.get(api.base_url + "/cgi-bin/agent/get",
                         params={"access_token": token, "agentid": AGENT}).json()["errcode"] == 42001


def test_sending_checks_the_text_limit_the_chat_and_the_trusted_ips():
    with FakeWecomAPI(corp_id=CORP, agent_id=AGENT, secret="s3cret") as api:
        token = httpx.get(api.base_url + "/cgi-bin/gettoken",
                          params={"corpid": CORP, "corpsecret": "s3cret"}).json()["access_token"]
        url = api.base_url + "/cgi-bin/message/send"
        ok = httpx.post(url, params={"access_token": token}, json={
            "touser": "zhangsan", "msgtype": "text", "agentid": int(AGENT), "text": {"content": "好" * 682}}).json()
        assert ok["errcode"] == 0  # 2,046 bytes
        too_long = httpx.post(url, params={"access_token": token}, json={
            "touser": "zhangsan", "msgtype": "text", "agentid": int(AGENT),
            "text": {"content": "好" * (TEXT_LIMIT // 3 + 1)}}).json()
        assert too_long["errcode"] == 45002
        assert api.sent_to("zhangsan") == ["好" * 682]
        chat = httpx.post(api.base_url + "/cgi-bin/appchat/send", params={"access_token": token}, json={
            "chatid": "wrchat1", "msgtype": "text", "text": {"content": "hi"}}).json()
        assert chat["errcode"] == 86003
        api.chats.add("wrchat1")
        httpx.post(api.base_url + "/cgi-bin/appchat/send", params={"access_token": token}, json={
            "chatid": "wrchat1", "msgtype": "text", "text": {"content": "hi"}})
        assert api.wait_sent("chat:wrchat1", 1) == ["hi"]
        api.trusted_ips = {"10.0.0.1"}
        refused = httpx.post(url, params={"access_token": token}, json={
            "touser": "zhangsan", "msgtype": "text", "agentid": int(AGENT), "text": {"content": "x"}}).json()
        assert refused["errcode"] == 60020 and "not allow to access from your ip" in refused["errmsg"]
