"""The fake Feishu server answers as Feishu does, as lark-oapi reads it (its own clients, pointed at the fake)."""

from __future__ import annotations

import json

import httpx
import lark_oapi as lark
import pytest
from lark_oapi.api.im.v1 import CreateMessageRequest, CreateMessageRequestBody
from lark_oapi.core.exception import ObtainAccessTokenException
from lark_oapi.core.token.manager import TokenManager

from tests.fakes.feishu_server import APP_ID, APP_SECRET, BODY_LIMIT, FakeFeishu


@pytest.fixture
def fs():
    # lark-oapi keeps one tenant token per app id for the process: one from an earlier fake must not be used
    TokenManager.cache.set(f"self_tenant_token:{APP_ID}", "", 0)
    with FakeFeishu() as server:
        yield server


def token(fs: FakeFeishu, app_id: str = APP_ID, secret: str = APP_SECRET) -> dict:
    return httpx.post(fs.base_url + "/open-apis/auth/v3/tenant_access_token/internal",
                      json={"app_id": app_id, "app_secret": secret}).json()


def test_the_token_endpoint_and_its_refusals(fs):
    good = token(fs)
    assert good["code"] == 0 and good["tenant_access_token"].startswith("t-") and good["expire"] == 7200
    assert token(fs, secret="nope") == {"code": 10014, "msg": "app secret invalid"}
    assert token(fs, app_id="cli_other")["code"] == 10003


def test_calls_without_a_valid_token_get_feishus_invalid_token_answer(fs):
    answer = httpx.get(fs.base_url + "/open-apis/bot/v3/info", headers={"Authorization": "Bearer t-forged"})
    assert answer.status_code == 400 and answer.json()["code"] == 99991663


def test_lark_oapi_sends_through_the_fake_and_reads_its_errors(fs):
    client = lark.Client.builder().app_id(APP_ID).app_secret(APP_SECRET).domain(fs.base_url).build()

    def send(msg_type: str, content: str):
        body = CreateMessageRequestBody.builder().receive_id("oc_1").msg_type(msg_type).content(content).build()
        return client.im.v1.message.create(
            CreateMessageRequest.builder().receive_id_type("chat_id").request_body(body).build())

    sent = send("text", json.dumps({"text": "hi"}))
    assert sent.success() and sent.data.message_id.startswith("om_")
    assert fs.texts("oc_1") == ["hi"]
    too_long = send("text", json.dumps({"text": "x" * BODY_LIMIT}))
    assert (too_long.success(), too_long.code) == (False, 230025)
    # a text message cannot be patched, only a card
    patched = httpx.patch(f"{fs.base_url}/open-apis/im/v1/messages/{sent.data.message_id}",
                          headers={"Authorization": "Bearer " + fs.tokens[-1]},
                          json={"content": json.dumps({"text": "changed"})})
    assert patched.json()["code"] == 230001
    wrong = lark.Client.builder().app_id(APP_ID).app_secret("bad").domain(fs.base_url).build()
    TokenManager.cache.set(f"self_tenant_token:{APP_ID}", "", 0)
    with pytest.raises(ObtainAccessTokenException) as refused:
        body = CreateMessageRequestBody.builder().receive_id("oc_1").msg_type("text").content("{}").build()
        wrong.im.v1.message.create(
            CreateMessageRequest.builder().receive_id_type("chat_id").request_body(body).build())
    assert refused.value.code == 10014


def test_the_websocket_endpoint_discovery_as_lark_oapi_reads_it(fs):
    found = httpx.post(fs.base_url + "/callback/ws/endpoint", json={"AppID": APP_ID, "AppSecret": APP_SECRET}).json()
    assert found["code"] == 0
    assert "device_id=" in found["data"]["URL"] and "service_id=" in found["data"]["URL"]
    assert found["data"]["ClientConfig"]["PingInterval"] > 0
    refused = httpx.post(fs.base_url + "/callback/ws/endpoint", json={"AppID": APP_ID, "AppSecret": "x"}).json()
    assert refused["code"] != 0
