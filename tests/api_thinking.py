"""Thinking blocks as the Messages API signs and checks them, for the test servers.

The lower half of :mod:`tests.api_rules` (which imports this module and re-exports
its builders): pure functions, no server state but a per-process signing secret.

A ``thinking`` block's ``signature`` (and a ``redacted_thinking`` block's ``data``) is
opaque base64 that carries the producing model and three MACs (HMAC-SHA256 with a
per-process secret) over the thinking text (a redacted block's random nonce) and:

* the model, the sha256 of the block's canonical prefix; and the model, the sha256 of
  the request's tool list: a ``preserved`` model (preserved thinking) checks them, so a
  block replayed after the conversation before it changed is "bound to a different
  conversation" (a changed tool list counts unless the request has the
  ``mid-conversation-tool-changes`` beta);
* the model's family and the two others: any model checks it, so a changed text, a
  changed, missing or forged signature is refused.

The canonical prefix of a block is the request's ``system`` and the messages before
the block, plus the blocks before it in its own message (and apart, ``tools``), with
``cache_control`` removed, ``null`` fields dropped and string contents normalised to
one text block. Block and message fields are put in a fixed order (the API parses them;
a client's SDK may write them in any order), but free-form JSON -- a ``tool_use``
block's ``input``, a tool's ``input_schema`` -- keeps its key order: a client that
reorders a tool call's input changes the prompt the model sees.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
from dataclasses import dataclass
from typing import Any

JsonDict = dict[str, Any]

THINKING_TYPES = ("thinking", "redacted_thinking")
# Free-form JSON inside blocks and tools: its key order is part of the prompt.
_FREE = frozenset({"input", "input_schema"})
_SECRET = os.urandom(32)
_VERSION = 1


@dataclass(frozen=True)
class Refusal:
    """A request the API refuses: HTTP ``status``, the error ``kind`` and its message.
    ``param`` and ``code`` are for OpenAI's error shape (Chat Completions)."""

    message: str
    status: int = 400
    kind: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None


def tokens(part: Any) -> int:
    """A stand-in tokenizer: about four characters of JSON per token."""
    return len(json.dumps(part, sort_keys=True, separators=(",", ":"))) // 4 + 1


# --- builders -------------------------------------------------------------------------


def thinking_block(text: str, *, signature: str = "") -> JsonDict:
    """A ``thinking`` block for a scripted reply. Without a ``signature`` the server signs
    it when it sends the reply; pass one (``"forged"``) to script a bad block."""
    return {"type": "thinking", "thinking": text, "signature": signature}


def redacted_thinking_block(data: str = "") -> JsonDict:
    """A ``redacted_thinking`` block; without ``data`` the server fills in a signed one."""
    return {"type": "redacted_thinking", "data": data}


def is_thinking(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") in THINKING_TYPES


def unsigned(block: JsonDict) -> bool:
    key = "signature" if block.get("type") == "thinking" else "data"
    return not block.get(key)


# --- the canonical prefix -------------------------------------------------------------


def _text(value: str) -> list[JsonDict]:
    return [{"type": "text", "text": value}]


def _canon(part: Any) -> Any:
    if isinstance(part, dict):
        out: JsonDict = {}
        for key, value in sorted(part.items()):
            if key == "cache_control" or value is None:
                continue
            if key == "content" and isinstance(value, str):
                value = _text(value)  # a message's or a tool_result's content
            out[key] = value if key in _FREE else _canon(value)
        return out
    if isinstance(part, list):
        return [_canon(v) for v in part]
    return part


def content_blocks(message: Any) -> list[Any]:
    """A message's content as a list of blocks (a string is one text block)."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return _text(content)
    return list(content) if isinstance(content, list) else []


def prefix_digest(body: JsonDict, index: int, blocks_before: list[Any]) -> bytes:
    """sha256 of the canonical prefix (but the tools: :func:`tools_digest`) of a block in
    ``messages[index]`` (``index`` may be ``len(messages)``: the reply) that comes after
    ``blocks_before`` in its message."""
    system = body.get("system")
    messages = body.get("messages") or []
    role = messages[index].get("role") if index < len(messages) else "assistant"
    prefix = {
        "system": _canon(_text(system) if isinstance(system, str) else system or []),
        "messages": [*(_canon(m) for m in messages[:index]),
                     {"role": role, "content": _canon(blocks_before)}],
    }  # fmt: skip
    return _sha256(prefix)


def tools_digest(body: JsonDict) -> bytes:
    """sha256 of the request's canonical tool list, the start of every prefix."""
    return _sha256(_canon(body.get("tools") or []))


def _sha256(part: Any) -> bytes:
    raw = json.dumps(part, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(raw.encode()).digest()


# --- signatures -----------------------------------------------------------------------


def family(model: str) -> str:
    """The model family, whose models read each other's (unbound) thinking:
    ``claude-opus-4-6`` -> ``claude-opus``, ``claude-test`` -> ``claude-test``."""
    parts = model.split("-")
    while len(parts) > 1 and re.fullmatch(r"\d+", parts[-1]):
        parts.pop()
    return "-".join(parts)


def _mac(*parts: bytes) -> bytes:
    return hmac.new(_SECRET, b"\0".join(parts), hashlib.sha256).digest()


def _text_of(block: JsonDict) -> bytes:
    return str(block.get("thinking") or "").encode()


def sign(block: JsonDict, model: str, prefix: bytes, tools: bytes) -> JsonDict:
    """``block`` signed by ``model`` after the ``prefix`` and ``tools`` digests: a new
    block. The MACs cover a thinking block's text, a redacted block's random nonce."""
    name = model.encode()
    redacted = block.get("type") == "redacted_thinking"
    payload = os.urandom(16) if redacted else _text_of(block)
    bound = _mac(b"bound", name, prefix, payload) + _mac(b"tools", name, tools, payload)
    # The last MAC covers the others too: no byte of a signature can change unnoticed.
    macs = bound + _mac(b"text", family(model).encode(), payload, bound)
    raw = bytes([_VERSION, len(name)]) + name + (payload if redacted else b"") + macs
    if redacted:
        return {**block, "data": base64.b64encode(raw).decode()}
    return {**block, "signature": base64.b64encode(raw).decode()}


@dataclass(frozen=True)
class _Signed:
    model: str
    payload: bytes
    bound_mac: bytes
    tools_mac: bytes
    text_mac: bytes


def _read(block: JsonDict) -> _Signed | None:
    redacted = block.get("type") == "redacted_thinking"
    value = block.get("data" if redacted else "signature")
    if not isinstance(value, str) or not value:
        return None
    try:
        raw = base64.b64decode(value, validate=True)
        size = raw[1]
        model = raw[2 : 2 + size].decode()
    except (ValueError, IndexError, UnicodeDecodeError):
        return None
    rest = raw[2 + size :]
    if raw[0] != _VERSION or len(rest) != (16 if redacted else 0) + 96:
        return None
    payload = rest[:16] if redacted else _text_of(block)
    return _Signed(model, payload, rest[-96:-64], rest[-64:-32], rest[-32:])


def check_block(
    block: JsonDict, model: str, preserved: bool, prefix: bytes, tools: bytes | None
) -> str | None:
    """None when ``model`` accepts the block, else why not: ``"invalid"`` (changed text,
    missing or forged signature), ``"model"`` (a preserved model may not read a block of
    another model: dropped without an error) or ``"prefix"`` (on a ``preserved`` model,
    bound to a different conversation: the ``prefix`` digest, or the ``tools`` digest
    unless None, differs from the one it was signed with)."""
    signed = _read(block)
    if signed is None:
        return "invalid"
    bound = signed.bound_mac + signed.tools_mac
    expected = _mac(b"text", family(signed.model).encode(), signed.payload, bound)
    if not hmac.compare_digest(expected, signed.text_mac):
        return "invalid"
    if preserved and signed.model != model:
        return "model"
    if family(signed.model) != family(model):
        return "invalid"
    if not preserved:
        return None
    name = model.encode()
    same = hmac.compare_digest(_mac(b"bound", name, prefix, signed.payload), signed.bound_mac)
    if tools is not None:
        same = same and hmac.compare_digest(
            _mac(b"tools", name, tools, signed.payload), signed.tools_mac
        )
    return None if same else "prefix"


def invalid_text(path: str) -> str:
    return f"{path}: Invalid `signature` in `thinking` block"


def bound_text(path: str) -> str:
    return (
        f"{invalid_text(path)}. The block is bound to a different conversation. Remove the"
        ' block, or set `thinking.block_binding.prefix_mismatch_behavior` to "drop_block".'
    )


def check_echoed(
    body: JsonDict, model: str, preserved: bool, drop: bool, *, tools: bool = True
) -> Refusal | tuple[JsonDict, list[JsonDict]]:
    """Check every thinking block of the request's assistant messages. A refusal, or the
    body the model sees (blocks it may not read removed) and the ``input_transformations``
    that say so: a block of another model on a preserved model is dropped without an
    error; one bound to a different conversation is refused unless ``drop`` (the request
    asked for ``prefix_mismatch_behavior: "drop_block"``). ``tools``: whether a change
    of the tool list invalidates the blocks after it (not when the request may change
    its tools mid-conversation)."""
    messages = body.get("messages") or []
    tool_list = tools_digest(body)
    dropped: list[JsonDict] = []
    kept_messages: list[Any] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            kept_messages.append(message)
            continue
        blocks = content_blocks(message)
        kept: list[Any] = []
        for j, block in enumerate(blocks):
            if not is_thinking(block):
                kept.append(block)
                continue
            path = f"messages.{i}.content.{j}"
            prefix = prefix_digest(body, i, blocks[:j]) if preserved else b""
            why = check_block(block, model, preserved, prefix, tool_list if tools else None)
            if why == "invalid" or (why == "prefix" and not drop):
                return Refusal(invalid_text(path) if why == "invalid" else bound_text(path))
            if why is None:
                kept.append(block)
                continue
            reason = "model_binding_mismatch" if why == "model" else "prefix_binding_mismatch"
            dropped.append({"type": "thinking_dropped", "path": path, "reason": reason})
        kept_messages.append({**message, "content": kept} if len(kept) < len(blocks) else message)
    if not dropped:
        return body, []
    return {**body, "messages": kept_messages}, dropped


# --- replies --------------------------------------------------------------------------


def decorate_reply(
    request: JsonDict,
    reply: JsonDict,
    *,
    model: str,
    thinking_on: bool,
    shown: bool,
    number: int,
) -> JsonDict:
    """A scripted message as the API would send it: with a thinking block first when
    thinking is on and the script has none (its text ``Thinking about request N.``, or
    empty when the thinking is not ``shown``), and every unsigned thinking block signed
    for ``model``. The usage counts the text's tokens as
    output whether shown or not, as the API bills them."""
    content = [b for b in reply.get("content") or [] if isinstance(b, dict)]
    if len(content) != len(reply.get("content") or []):
        return reply  # not a message a client could read: leave it to the client's check
    usage = dict(reply.get("usage") or {})
    if thinking_on and not any(is_thinking(b) for b in content):
        text = f"Thinking about request {number}."
        content = [thinking_block(text if shown else ""), *content]
        usage["output_tokens"] = int(usage.get("output_tokens") or 0) + tokens(text)
    signed: list[JsonDict] = []
    index, tool_list = len(request.get("messages") or []), tools_digest(request)
    for block in content:
        if is_thinking(block) and unsigned(block):
            block = sign(block, model, prefix_digest(request, index, signed), tool_list)
        signed.append(block)
    return {**reply, "content": signed, "usage": usage}
