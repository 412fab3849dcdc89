"""Chat Completions: jpfs's messages translated to it, and its replies checked and back.

jpfs's neutral messages are the Messages API's content blocks (:mod:`.base`); Chat
Completions carries the same turns differently: the system prompt is a message, an
assistant's tool calls are ``tool_calls`` with JSON-string ``arguments``, and each tool
result is a ``role: "tool"`` message answering a ``tool_call_id``. A reply, plain or
streamed (``data: {chunk}`` lines ending with ``data: [DONE]``), is checked field by
field: a server that answers 200 with anything is a ProviderError naming what is
wrong, never an AttributeError.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from jpfs.errors import ProviderError
from jpfs.infra import textfile
from jpfs.infra.providers.anthropic_reply import one_line
from jpfs.infra.providers.base import JsonDict, Reply, Request, ToolCall, Usage

# Chat Completions' finish_reason -> jpfs's stop reasons (the Messages API's words).
STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}
# Tool results carry no error flag in Chat Completions: the model reads it in the text.
ERROR_PREFIX = "[tool error] "
# The key a call's unreadable arguments are kept under. No jpfs tool takes it (their
# schemas forbid unknown arguments), so the call is answered with a tool error naming
# it, which the model reads and corrects: a bad call is the model's to fix, not a crash.
BAD_ARGUMENTS = "(arguments are not a JSON object)"


def malformed(status: int, why: str) -> ProviderError:
    return ProviderError(one_line(f"openai: malformed response (HTTP {status}): {why}"))


# -- requests --------------------------------------------------------------------------


def to_chat(request: Request) -> list[JsonDict]:
    """The request's system prompt and messages as Chat Completions messages."""
    out: list[JsonDict] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    for message in request.messages:
        role, content = message.get("role"), message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            continue
        if role == "assistant":
            out.append(_assistant(blocks))
            continue
        texts: list[str] = []
        for block in blocks:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "tool_result":
                # Tool messages must follow the assistant turn that called them, before
                # any user text of the same turn.
                text = _text_of(block.get("content"))
                if block.get("is_error"):
                    text = ERROR_PREFIX + text
                out.append(
                    {"role": "tool", "tool_call_id": str(block.get("tool_use_id")), "content": text}
                )
            elif kind == "text" and block.get("text"):
                texts.append(str(block["text"]))
        if texts:
            out.append({"role": "user", "content": "\n\n".join(texts)})
    return out


def _assistant(blocks: list[Any]) -> JsonDict:
    texts: list[str] = []
    calls: list[JsonDict] = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and block.get("text"):
            texts.append(str(block["text"]))
        elif block.get("type") == "tool_use":
            calls.append(
                {
                    "id": str(block.get("id")),
                    "type": "function",
                    "function": {
                        "name": str(block.get("name")),
                        "arguments": json.dumps(block.get("input") or {}),
                    },
                }
            )
        # Thinking blocks are the Messages API's; Chat Completions has no place for them.
    # A turn of tool calls alone has no content (null), as the API writes it.
    message: JsonDict = {"role": "assistant", "content": "".join(texts) or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    return message


def _text_of(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("text")
        )
    return "" if content is None else str(content)


def tools(request: Request) -> list[JsonDict]:
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
            },
        }
        for t in request.tools
    ]


# -- replies ---------------------------------------------------------------------------


def parse_reply(status: int, body: bytes) -> Reply:
    """The reply from a 2xx body."""
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise malformed(status, f"body is not JSON ({exc}): {body[:80]!r}") from exc
    return reply_from(data, status)


def read_stream(status: int, lines: Iterable[str], on_text: Callable[[str], None]) -> Reply:
    """A streamed completion, its text handed to ``on_text`` as it arrives, assembled
    into the body a plain request returns and checked by the same code."""
    text: list[str] = []
    calls: dict[int, JsonDict] = {}
    finish: object = None
    model: object = ""
    usage: object = None
    done = False
    for line in lines:
        if not line.startswith("data:"):
            continue  # comments (": keep-alive") and blank lines between events
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            break
        try:
            chunk = json.loads(data)
        except ValueError as exc:
            raise malformed(status, f"a chunk is not JSON ({exc})") from exc
        if not isinstance(chunk, dict):
            raise malformed(status, "a chunk is not a JSON object")
        if isinstance(chunk.get("error"), dict):
            why = chunk["error"].get("message")
            raise ProviderError(one_line(f"openai: error mid-stream: {why}"))
        model = chunk.get("model") or model
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            continue  # the last chunk (usage only) has no choices
        choice = choices[0]
        finish = choice.get("finish_reason") or finish
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            continue
        piece = delta.get("content")
        if isinstance(piece, str) and piece:
            text.append(piece)
            on_text(piece)
        for call in delta.get("tool_calls") or []:
            _merge_call(calls, call, status)
    if not done:
        raise malformed(status, "the stream ended before data: [DONE]")
    message: JsonDict = {"role": "assistant", "content": "".join(text)}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    body = {"model": model, "choices": [{"message": message, "finish_reason": finish}]}
    if usage is not None:
        body["usage"] = usage
    return reply_from(body, status)


def _merge_call(calls: dict[int, JsonDict], delta: object, status: int) -> None:
    """A tool call's delta: the first names it, the later ones add to its arguments."""
    if not isinstance(delta, dict) or not isinstance(delta.get("index"), int):
        raise malformed(status, "a tool call delta has no index")
    call = calls.setdefault(
        delta["index"], {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
    )
    if isinstance(delta.get("id"), str):
        call["id"] = delta["id"]
    function = delta.get("function")
    if isinstance(function, dict):
        if isinstance(function.get("name"), str):
            call["function"]["name"] += function["name"]
        if isinstance(function.get("arguments"), str):
            call["function"]["arguments"] += function["arguments"]


def reply_from(data: object, status: int) -> Reply:
    def bad(why: str) -> ProviderError:
        return malformed(status, why)

    if not isinstance(data, dict):
        raise bad("body is not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise bad("no 'choices' list")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise bad("the choice has no message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise bad("the message's content is not text")
    if content and not textfile.encodable(content):
        # JSON's "\\ud800" decodes to a lone surrogate, which no file can hold.
        raise bad("the message's content is not valid Unicode (a lone surrogate)")
    calls = tuple(_tool_call(call, bad) for call in message.get("tool_calls") or [])
    finish = str(choice.get("finish_reason") or "stop")
    return Reply(
        text=content or "",
        tool_calls=calls,
        usage=_usage(data.get("usage")),
        model=str(data.get("model") or ""),
        stop_reason=STOP_REASONS.get(finish, finish),
    )


def _tool_call(call: object, bad: Callable[[str], ProviderError]) -> ToolCall:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise bad("a tool call is not a function call")
    call_id, name = call.get("id"), call["function"].get("name")
    raw = call["function"].get("arguments")
    if not (isinstance(call_id, str) and call_id and isinstance(name, str) and name):
        raise bad("a tool call lacks its id or name")
    if isinstance(raw, dict):
        return ToolCall(call_id, name, raw)  # some servers send the object itself
    text = raw if isinstance(raw, str) else ""
    try:
        arguments = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        return ToolCall(call_id, name, {BAD_ARGUMENTS: one_line(f"{exc}: {text}")})
    if not isinstance(arguments, dict):
        return ToolCall(call_id, name, {BAD_ARGUMENTS: one_line(text)})
    return ToolCall(call_id, name, arguments)


def _usage(usage: object) -> Usage:
    if not isinstance(usage, dict):
        return Usage()
    prompt = _int(usage.get("prompt_tokens"))
    details = usage.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
    cached = min(cached, prompt)
    # jpfs counts as the Messages API does: input excludes the tokens read from cache.
    return Usage(
        input_tokens=prompt - cached,
        output_tokens=_int(usage.get("completion_tokens")),
        cache_read_input_tokens=cached,
    )


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
