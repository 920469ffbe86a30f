"""A tool call's result as the text the model reads (DESIGN §13): text as it is, structured content as JSON,
images as a short note (DESIGN §5.1: no base64 in the context), resource links and embedded resources as text.
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

from mcp import types

logger = logging.getLogger(__name__)


def _image_note(kind: str, mime: str, data: str) -> str:
    try:
        size = len(base64.b64decode(data, validate=False))
    except ValueError:
        size = len(data) * 3 // 4
    return f"[{kind}: {mime or 'unknown type'}, {size:,} bytes, not shown to the model]"


def block_text(block: Any) -> str:
    """One content block as text."""
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent):
        return _image_note("image", block.mime_type, block.data)
    if isinstance(block, types.AudioContent):
        return _image_note("audio", block.mime_type, block.data)
    if isinstance(block, types.ResourceLink):
        parts = [f"[resource link: {block.uri}"]
        if block.name:
            parts.append(f" ({block.name})")
        if block.description:
            parts.append(f": {block.description}")
        return "".join(parts) + "]"
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        text = getattr(resource, "text", None)
        if isinstance(text, str):
            return f"[resource {resource.uri}]\n{text}"
        return _image_note(f"resource {resource.uri}", resource.mime_type or "", getattr(resource, "blob", ""))
    return json.dumps(block.model_dump(mode="json", exclude_none=True), ensure_ascii=False)


def result_text(result: types.CallToolResult) -> str:
    """The whole result as text; an error result starts with ``Error:`` so the model knows the call failed."""
    parts = [block_text(block) for block in result.content]
    structured = result.structured_content
    if structured is not None:
        dumped = json.dumps(structured, ensure_ascii=False)
        # FastMCP sends a function's return value both as text and as {"result": …}: say it once
        if not any(dumped == p or json.dumps(structured.get("result"), ensure_ascii=False) == p
                   or str(structured.get("result")) == p for p in parts):
            parts.append(dumped)
    text = "\n".join(p for p in parts if p) or "(no output)"
    return f"Error: {text}" if result.is_error else text
