"""Replies of the Messages API, checked field by field: a plain body or an event stream.

A proxy or a broken gateway can answer 200 with anything, and that must be a
ProviderError naming what is wrong, never an AttributeError; a streamed reply is
assembled into the body a plain request returns and checked by the same code.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from jpfs.errors import ProviderError
from jpfs.infra import textfile
from jpfs.infra.providers.base import JsonDict, Reply, ToolCall, Usage

if TYPE_CHECKING:
    import httpx2

_MAX_MESSAGE_CHARS = 300


def malformed(status: int, why: str) -> ProviderError:
    return ProviderError(one_line(f"anthropic: malformed response (HTTP {status}): {why}"))


def read_stream(status: int, lines: Iterable[str], on_text: Callable[[str], None]) -> Reply:
    """A streamed message (server-sent events), its text handed to ``on_text`` as it
    arrives, assembled into the same body a plain request returns, then checked by the
    same code (:func:`_reply_from`)."""
    message: JsonDict = {}
    blocks: dict[int, JsonDict] = {}
    partial: dict[int, list[str]] = {}
    for line in lines:
        if not line.startswith("data:"):
            continue  # "event: ..." names the type the data repeats; blank lines end events
        try:
            event = json.loads(line[5:])
        except ValueError as exc:
            raise malformed(status, f"an event is not JSON ({exc})") from exc
        if not isinstance(event, dict):
            raise malformed(status, "an event is not a JSON object")
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            message = dict(event["message"])
        elif kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            blocks[_int(event.get("index"))] = dict(event["content_block"])
        elif kind == "content_block_delta" and isinstance(event.get("delta"), dict):
            index, delta = _int(event.get("index")), event["delta"]
            block = blocks.get(index)
            if block is None:
                raise malformed(status, "a delta for a block that never started")
            if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                block["text"] = str(block.get("text") or "") + delta["text"]
                on_text(delta["text"])
            elif delta.get("type") == "thinking_delta" and isinstance(delta.get("thinking"), str):
                block["thinking"] = str(block.get("thinking") or "") + delta["thinking"]
            elif delta.get("type") == "signature_delta" and isinstance(delta.get("signature"), str):
                block["signature"] = str(block.get("signature") or "") + delta["signature"]
            elif delta.get("type") == "input_json_delta":
                partial.setdefault(index, []).append(str(delta.get("partial_json") or ""))
        elif kind == "message_delta":
            if isinstance(event.get("delta"), dict):
                message.update({k: v for k, v in event["delta"].items() if v is not None})
            if isinstance(event.get("usage"), dict):
                message["usage"] = {**(message.get("usage") or {}), **event["usage"]}
        elif kind == "error":
            error = event.get("error")
            why = error.get("message") if isinstance(error, dict) else None
            raise ProviderError(one_line(f"anthropic: error mid-stream: {why}"))
    for index, pieces in partial.items():
        text = "".join(pieces)
        try:
            blocks[index]["input"] = json.loads(text) if text else {}
        except ValueError as exc:
            raise malformed(status, f"a tool call's input is not JSON ({exc})") from exc
    if not message:
        raise malformed(status, "the stream had no message_start")
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return reply_from(message, status)


def parse_reply(response: httpx2.Response) -> Reply:
    """The reply from a 2xx body, checked field by field: a proxy or a broken gateway can
    answer 200 with anything, and that must be a ProviderError, not an AttributeError."""
    try:
        data = json.loads(response.content)
    except ValueError as exc:
        raise malformed(
            response.status_code, f"body is not JSON ({exc}): {response.text[:80]!r}"
        ) from exc
    return reply_from(data, response.status_code)


def reply_from(data: object, status: int) -> Reply:
    def bad(why: str) -> ProviderError:
        return malformed(status, why)

    if not isinstance(data, dict):
        raise bad("body is not a JSON object")
    content = data.get("content")
    if not isinstance(content, list):
        raise bad("no 'content' list")
    texts: list[str] = []
    calls: list[ToolCall] = []
    thinking: list[JsonDict] = []
    for block in content:
        if not isinstance(block, dict):
            raise bad("a content block is not an object")
        kind = block.get("type")
        if kind == "text":
            text = block.get("text")
            if not isinstance(text, str):
                raise bad("a text block has no text")
            if not textfile.encodable(text):
                raise bad("a text block is not valid Unicode (a lone surrogate)")
            texts.append(text)
        elif kind == "tool_use":
            call_id, name, args = block.get("id"), block.get("name"), block.get("input")
            if not (isinstance(call_id, str) and isinstance(name, str) and isinstance(args, dict)):
                raise bad("a tool_use block lacks id, name or input")
            calls.append(ToolCall(call_id, name, args))
        elif kind == "thinking":
            text, signature = block.get("thinking"), block.get("signature")
            if not (isinstance(text, str) and isinstance(signature, str)):
                raise bad("a thinking block lacks its thinking or signature")
            if not (textfile.encodable(text) and textfile.encodable(signature)):
                raise bad("a thinking block is not valid Unicode (a lone surrogate)")
            thinking.append(block)  # as received: it goes back byte for byte
        elif kind == "redacted_thinking":
            if not isinstance(block.get("data"), str) or not textfile.encodable(block["data"]):
                raise bad("a redacted_thinking block lacks its data, or it is not valid Unicode")
            thinking.append(block)
        # Other blocks (server tools) carry nothing jpfs acts on.
    usage = data.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    return Reply(
        text="".join(texts),
        tool_calls=tuple(calls),
        usage=Usage(
            # As the API counts them: input excludes what was read from or written to
            # the cache, which are priced apart.
            input_tokens=_int(usage.get("input_tokens")),
            output_tokens=_int(usage.get("output_tokens")),
            cache_read_input_tokens=_int(usage.get("cache_read_input_tokens")),
            cache_creation_input_tokens=_int(usage.get("cache_creation_input_tokens")),
        ),
        model=str(data.get("model") or ""),
        stop_reason=str(data.get("stop_reason") or "end_turn"),
        thinking=tuple(thinking),
    )


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_MESSAGE_CHARS else flat[: _MAX_MESSAGE_CHARS - 1] + "…"
