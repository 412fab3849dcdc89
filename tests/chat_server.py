"""A local HTTP server that speaks the Chat Completions API, for tests.

The counterpart of :mod:`tests.messages_server` (whose HTTP machinery, recording and
scripting it shares): tests drive the real ``openai`` SDK against it
(``base_url=server.url``). Enqueue replies or set a responder; every request is
recorded. ``stream: true`` requests get a successful completion as server-sent events
(``data: {chunk}`` lines, the usage chunk when ``stream_options.include_usage`` asks
for it, then ``data: [DONE]``); errors stay JSON in OpenAI's shape.

As the real servers do, it refuses (400, before any scripted answer, consuming none)
tool messages that answer no tool call, tool calls left unanswered, and prompts over
the model's context window (``server.windows``, else :data:`CHAT_WINDOW` tokens by the
stand-in tokenizer: "This model's maximum context length is N tokens. However, your
messages resulted in M tokens. ..."). For models in ``server.count_usage`` the reply's
``usage.prompt_tokens`` is the computed prompt size.

    def test_x(chat_server: ChatServer) -> None:
        chat_server.enqueue(chat_error(429, retry_after=0), chat_text("hi"))
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests import api_chat_rules
from tests.api_chat_rules import CHAT_WINDOW
from tests.api_thinking import Refusal
from tests.messages_server import Finish, MessagesServer, RecordedRequest, Response

JsonDict = dict[str, Any]
DEFAULT_MODEL = "local-test"
_ids = itertools.count(1)


def _completion(
    message: JsonDict,
    finish: str,
    *,
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int,
) -> JsonDict:
    return {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        },
    }


def chat_text(
    text: str,
    *,
    model: str = DEFAULT_MODEL,
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
    cached_tokens: int = 0,
    finish: str = "stop",
    delay: float = 0.0,
) -> Response:
    body = _completion(
        {"role": "assistant", "content": text},
        finish,
        model=model,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cached_tokens=cached_tokens,
    )
    return Response(body=body, delay=delay)


def call(name: str, arguments: JsonDict | str, *, id: str | None = None) -> JsonDict:
    """One tool call; ``arguments`` a dict (sent as JSON text) or the raw text itself."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "id": id or f"call_{next(_ids)}",
        "type": "function",
        "function": {"name": name, "arguments": raw},
    }


def chat_tool_calls(
    *calls: JsonDict,
    text: str | None = None,
    model: str = DEFAULT_MODEL,
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
    cached_tokens: int = 0,
) -> Response:
    body = _completion(
        {"role": "assistant", "content": text, "tool_calls": list(calls)},
        "tool_calls",
        model=model,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cached_tokens=cached_tokens,
    )
    return Response(body=body)


def chat_error(
    status: int, message: str = "error", *, retry_after: float | None = None
) -> Response:
    headers = {} if retry_after is None else {"retry-after": f"{retry_after:g}"}
    body = {"error": {"message": message, "type": "server_error", "code": None, "param": None}}
    return Response(status=status, body=body, headers=headers)


def chat_malformed(kind: str) -> Response:
    """A broken success, as :func:`tests.messages_server.malformed_reply` for Chat
    Completions: ``"json"`` (invalid JSON), ``"shape"`` (JSON, but not a completion),
    ``"html"`` (a proxy's error page with a text/html content type)."""
    if kind == "json":
        return Response(body=b'{"object": "chat.completion", "choices": [')
    if kind == "shape":
        return Response(body={"object": "chat.completion", "choices": "not a list"})
    if kind == "html":
        return Response(body=b"<html>oops</html>", content_type="text/html")
    raise ValueError(f"unknown malformed kind {kind!r}")


def sse_chunks(completion: JsonDict, include_usage: bool) -> bytes:
    """A completion as Chat Completions streams it: the text in two pieces, each tool
    call's arguments in two pieces, the finish reason, the usage chunk, ``[DONE]``."""
    base = {k: completion[k] for k in ("id", "object", "created", "model")}
    base["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: JsonDict, finish: str | None = None) -> JsonDict:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    text = message.get("content") or ""
    half = len(text) // 2
    for piece in (text[:half], text[half:]):
        if piece:
            chunks.append(chunk({"content": piece}))
    for index, tool in enumerate(message.get("tool_calls") or []):
        raw = tool["function"]["arguments"]
        cut = len(raw) // 2
        first = {"index": index, "id": tool["id"], "type": "function",
                 "function": {"name": tool["function"]["name"], "arguments": raw[:cut]}}  # fmt: skip
        chunks.append(chunk({"tool_calls": [first]}))
        chunks.append(
            chunk({"tool_calls": [{"index": index, "function": {"arguments": raw[cut:]}}]})
        )
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append({**base, "choices": [], "usage": completion["usage"]})
    lines = [f"data: {json.dumps(c)}\n\n" for c in chunks]
    return ("".join(lines) + "data: [DONE]\n\n").encode()


def chat_text_of(request: JsonDict, role: str) -> str:
    """Text of the last message with ``role`` (``user``, ``tool``, ``system``)."""
    for message in reversed(request.get("messages") or []):
        if message.get("role") == role:
            return str(message.get("content") or "")
    return ""


def _counted(response: Response, prompt_tokens: int) -> Response:
    body = response.body
    if response.status != 200 or not isinstance(body, dict) or "usage" not in body:
        return response
    usage = {**body["usage"], "prompt_tokens": prompt_tokens}
    usage["total_tokens"] = prompt_tokens + int(usage.get("completion_tokens") or 0)
    return Response(response.status, {**body, "usage": usage}, response.headers, response.delay)


class ChatServer(MessagesServer):
    """Scripted Chat Completions on 127.0.0.1 (a free port); use as a context manager."""

    def __init__(self) -> None:
        super().__init__()
        # Context windows by model (others: CHAT_WINDOW), and the models whose usage
        # says the prompt's computed size instead of the script's.
        self.windows: dict[str, int] = {}
        self.count_usage: set[str] = set()

    @property
    def url(self) -> str:
        return super().url + "/v1"

    def _check(self, request: RecordedRequest) -> Refusal | Finish:
        body = request.json
        if body is None:
            return lambda response, number: response
        model = str(body.get("model"))
        refused = api_chat_rules.check_chat(body, self.windows.get(model, CHAT_WINDOW))
        if refused is not None:
            return refused
        if model not in self.count_usage:
            return lambda response, number: response
        return lambda response, number: _counted(response, api_chat_rules.chat_prompt_tokens(body))

    def _refusal(self, refusal: Refusal) -> Response:
        error = {"message": refusal.message, "type": refusal.kind, "param": refusal.param,
                 "code": refusal.code}  # fmt: skip
        return Response(status=refusal.status, body={"error": error})

    def _answer(self, request: RecordedRequest) -> Response:
        if request.path != "/v1/chat/completions":
            return chat_error(404, f"chat_server: no route for {request.path}")
        body = request.json or {}
        stream = bool(body.get("stream"))
        self.streaming = True  # the parent's check; streams are always spoken here
        response = super()._answer(request)
        if not stream or response.status != 200 or not isinstance(response.body, dict):
            return response
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return Response(
            200, sse_chunks(response.body, usage), response.headers, response.delay,
            "text/event-stream",
        )  # fmt: skip


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    with ChatServer() as server:
        yield server
