"""The fake DingTalk server answers as DingTalk does, as dingtalk-stream reads it (the SDK runs in a subprocess,
pointed at the fake by its DINGTALK_OPENAPI_ENDPOINT environment variable, read when it is imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from tests.fakes.dingtalk_server import CLIENT_ID, CLIENT_SECRET, TEXT_LIMIT, FakeDingTalk

SDK_SCRIPT = """
import json, logging
import dingtalk_stream
from dingtalk_stream import ChatbotMessage
for secret in (%r, "wrong"):
    client = dingtalk_stream.DingTalkStreamClient(dingtalk_stream.Credential(%r, secret),
                                                  logger=logging.getLogger("quiet"))
    client.register_callback_handler(ChatbotMessage.TOPIC, dingtalk_stream.ChatbotHandler())
    print(json.dumps({"connection": client.open_connection(), "token": client.get_access_token()}))
"""


@pytest.fixture
def dt():
    with FakeDingTalk() as server:
        yield server


def test_the_sdk_opens_a_connection_and_gets_a_token_from_the_fake(dt):
    env = {**os.environ, "DINGTALK_OPENAPI_ENDPOINT": dt.base_url}
    out = subprocess.run([sys.executable, "-c", SDK_SCRIPT % (CLIENT_SECRET, CLIENT_ID)], env=env,
                         capture_output=True, text=True, timeout=60, check=True).stdout.splitlines()
    good, bad = (json.loads(line) for line in out)
    assert good["connection"]["endpoint"] == f"ws://127.0.0.1:{dt.port}/connect" and good["connection"]["ticket"]
    assert good["token"] == dt.tokens[0]
    assert bad == {"connection": None, "token": None}  # the SDK logs the 401 and gives None


def test_the_send_apis_need_a_token_and_take_markdown_within_the_limit(dt):
    token = httpx.post(dt.base_url + "/v1.0/oauth2/accessToken",
                       json={"appKey": CLIENT_ID, "appSecret": CLIENT_SECRET}).json()["accessToken"]
    refused = httpx.post(dt.base_url + "/v1.0/oauth2/accessToken", json={"appKey": CLIENT_ID, "appSecret": "x"})
    assert refused.status_code == 401 and refused.json()["code"] == "authFailed"

    def send(text: str, key: str = "x-acs-dingtalk-access-token", value: str = token) -> httpx.Response:
        return httpx.post(dt.base_url + "/v1.0/robot/groupMessages/send", headers={key: value}, json={
            "robotCode": CLIENT_ID, "openConversationId": "cid_1", "msgKey": "sampleMarkdown",
            "msgParam": json.dumps({"title": "t", "text": text})})

    assert send("hi").status_code == 200 and dt.texts("cid_1") == ["hi"]
    assert send("hi", value="forged").json()["code"] == "InvalidAuthentication"
    assert send("x" * (TEXT_LIMIT + 1)).status_code == 400
    private = httpx.post(dt.base_url + "/v1.0/robot/oToMessages/batchSend",
                         headers={"x-acs-dingtalk-access-token": token},
                         json={"robotCode": CLIENT_ID, "userIds": ["alice01"], "msgKey": "sampleText",
                               "msgParam": json.dumps({"content": "hello"})})
    assert private.status_code == 200 and "processQueryKey" in private.json()
    dt.private_of["alice01"] = "cid_alice"
    assert dt.texts("cid_alice") == ["hello"]
