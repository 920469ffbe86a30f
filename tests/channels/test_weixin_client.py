"""The iLink client's pure parts (channels/weixin/client.py); its HTTP side is tested against the fake server."""

from __future__ import annotations

import base64

import pytest

from channels.weixin.client import ILinkError, SessionExpired, _json, check, wechat_uin


def test_x_wechat_uin_is_base64_of_a_decimal_uint32():
    for _ in range(50):
        decoded = base64.b64decode(wechat_uin(), validate=True).decode()
        assert decoded.isdigit() and 0 <= int(decoded) < 2**32


def test_errcode_minus_14_in_ret_or_errcode_is_a_session_expiry():
    for answer in ({"ret": -14}, {"errcode": -14, "errmsg": "session timeout"}, {"ret": "-14"}):
        with pytest.raises(SessionExpired):
            check("getupdates", answer)


def test_any_other_nonzero_ret_is_an_error_that_names_the_call():
    with pytest.raises(ILinkError) as err:
        check("sendmessage", {"ret": -2, "errmsg": "invalid context"})
    assert not isinstance(err.value, SessionExpired)
    assert str(err.value) == "sendmessage: ret=-2 errcode=0 invalid context"
    assert check("sendmessage", {"ret": 0}) == {"ret": 0}
    assert check("sendmessage", {}) == {}


def test_an_answer_that_is_not_a_json_object_is_an_error():
    with pytest.raises(ILinkError, match="not a JSON object"):
        check("getupdates", ["a", "list"])
    with pytest.raises(ILinkError, match="not JSON"):
        _json("<html>502 Bad Gateway</html>")
