"""mcp_tools/results.py: what the model reads of each kind of MCP content."""

from __future__ import annotations

import base64

from mcp import types

from mcp_tools.results import result_text


def result(*content, structured=None, error=False) -> types.CallToolResult:
    return types.CallToolResult(content=list(content), structured_content=structured, is_error=error)


def test_text_blocks_are_joined_by_lines() -> None:
    assert result_text(result(types.TextContent(type="text", text="one"),
                              types.TextContent(type="text", text="two"))) == "one\ntwo"


def test_structured_content_is_said_once() -> None:
    text = types.TextContent(type="text", text='{\n  "sum": 3\n}')
    assert result_text(result(text, structured={"sum": 3})) == '{\n  "sum": 3\n}'
    assert result_text(result(types.TextContent(type="text", text="ok"), structured={"result": "ok"})) == "ok"
    assert result_text(result(structured={"sum": 3})) == '{"sum": 3}'
    assert result_text(result(types.TextContent(type="text", text="3 items"), structured={"n": 3})) == \
        '3 items\n{"n": 3}'


def test_images_are_a_note_and_links_and_resources_are_text() -> None:
    png = base64.b64encode(b"\x89PNG" + b"\0" * 96).decode()
    out = result_text(result(
        types.ImageContent(type="image", data=png, mime_type="image/png"),
        types.ResourceLink(type="resource_link", uri="file:///r.pdf", name="r.pdf", description="the report"),
        types.EmbeddedResource(type="resource", resource=types.TextResourceContents(uri="mem://note", text="hello"))))
    assert out.splitlines() == ["[image: image/png, 100 bytes, not shown to the model]",
                                "[resource link: file:///r.pdf (r.pdf): the report]", "[resource mem://note]", "hello"]


def test_an_error_result_says_so_and_an_empty_one_says_nothing_came() -> None:
    assert result_text(result(types.TextContent(type="text", text="no such city"), error=True)) == \
        "Error: no such city"
    assert result_text(result()) == "(no output)"
