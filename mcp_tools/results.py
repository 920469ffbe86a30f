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
        if isinstance(resource, types.TextResourceContents):
            return f"[resource {resource.uri}]\n{resource.text}"
        return _image_note(f"resource {resource.uri}", resource.mime_type or "", resource.blob)
    return json.dumps(block.model_dump(mode="json", exclude_none=True), ensure_ascii=False)


def _same(structured: dict[str, Any], text: str) -> bool:
    """Whether a text block already says what the structured content says (servers send both, DESIGN §13 asks
    for it once): the same JSON, or the ``{"result": …}`` wrapper of a plain return value."""
    wrapped = structured.get("result") if len(structured) == 1 else None
    if wrapped is not None and str(wrapped) == text:
        return True
    try:
        parsed = json.loads(text)
    except ValueError:
        return False
    return parsed == structured or (wrapped is not None and parsed == wrapped)


def result_text(result: types.CallToolResult) -> str:
    """The whole result as text; an error result starts with ``Error:`` so the model knows the call failed."""
    parts = [block_text(block) for block in result.content]
    structured = result.structured_content
    if structured is not None and not any(_same(structured, p) for p in parts):
        parts.append(json.dumps(structured, ensure_ascii=False))
    text = "\n".join(p for p in parts if p) or "(no output)"
    return f"Error: {text}" if result.is_error else text
