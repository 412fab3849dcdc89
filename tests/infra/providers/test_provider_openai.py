"""OpenAIProvider through the real ``openai`` SDK against the local Chat Completions
server (tests/chat_server.py): translation both ways, streaming, retries, errors,
cancellation and the key rules."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from jpfs.errors import Cancelled, ProviderError
from jpfs.infra.providers.base import Reply, Request, ToolSpec, Usage
from jpfs.infra.providers.openai import OpenAIProvider
from jpfs.infra.providers.openai_reply import BAD_ARGUMENTS
from tests.chat_server import (
    ChatServer,
    JsonDict,
    call,
    chat_error,
    chat_server,
    chat_text,
    chat_tool_calls,
)
from tests.conftest import wait_until
from tests.messages_server import Response

__all__ = ["chat_server"]  # the fixture
WORKER = "jpfs-openai-request"
TOOL = ToolSpec(
    "fs_read_file",
    "Read a file",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


def workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == WORKER]


@pytest.fixture(autouse=True)
def no_leaked_workers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    yield
    wait_until(lambda: not workers(), timeout=5, message="request threads to end")


def provider(server: ChatServer, **kwargs: Any) -> OpenAIProvider:
    kwargs.setdefault("backoff_base", 0.01)
    kwargs.setdefault("backoff_max", 0.05)
    return OpenAIProvider(base_url=server.url, **kwargs)


def request(**kwargs: Any) -> Request:
    kwargs.setdefault("model", "local-test")
    kwargs.setdefault("system", "You are a test.")
    kwargs.setdefault("messages", [{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    return Request(**kwargs)


def complete(p: OpenAIProvider, req: Request | None = None) -> Reply:
    return p.complete(req or request(), threading.Event())


def test_messages_and_tools_are_translated_to_chat_completions(chat_server: ChatServer) -> None:
    chat_server.enqueue(chat_text("done"))
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "read a"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Reading."},
            {"type": "thinking", "thinking": "not carried"},
            {"type": "tool_use", "id": "c1", "name": "fs_read_file", "input": {"path": "a"}},
            {"type": "tool_use", "id": "c2", "name": "fs_read_file", "input": {"path": "b"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "A"},
            {"type": "tool_result", "tool_use_id": "c2", "content": "no b", "is_error": True},
        ]},
    ]  # fmt: skip
    reply = complete(
        provider(chat_server),
        request(messages=messages, tools=(TOOL,), metadata={"conversation": "x1"}, max_tokens=77),
    )
    assert reply.text == "done" and reply.stop_reason == "end_turn"
    sent = chat_server.requests[-1]
    body = sent.body
    assert sent.headers["authorization"] == "Bearer test-key"
    assert sent.headers["x-jpfs-conversation"] == "x1"
    assert body["max_tokens"] == 77 and "max_completion_tokens" not in body
    assert body["tools"] == [
        {"type": "function", "function": {"name": "fs_read_file", "description": "Read a file",
                                          "parameters": TOOL.input_schema}}
    ]  # fmt: skip
    assert body["messages"] == [
        {"role": "system", "content": "You are a test."},
        {"role": "user", "content": "read a"},
        {"role": "assistant", "content": "Reading.", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "fs_read_file", "arguments": '{"path": "a"}'}},
            {"id": "c2", "type": "function",
             "function": {"name": "fs_read_file", "arguments": '{"path": "b"}'}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "A"},
        {"role": "tool", "tool_call_id": "c2", "content": "[tool error] no b"},
    ]  # fmt: skip
    assert "stream" not in body


def test_tool_calls_usage_and_finish_reason_come_back(chat_server: ChatServer) -> None:
    chat_server.enqueue(
        chat_tool_calls(
            call("fs_read_file", {"path": "a"}, id="c1"),
            call("fs_read_file", "{not json", id="c2"),
            call("fs_read_file", "[1]", id="c3"),
            prompt_tokens=100,
            completion_tokens=7,
            cached_tokens=60,
            model="served-model",
        )
    )
    reply = complete(provider(chat_server))
    assert reply.stop_reason == "tool_use" and reply.model == "served-model"
    first, second, third = reply.tool_calls
    assert (first.id, first.name, first.input) == ("c1", "fs_read_file", {"path": "a"})
    # Unreadable arguments become a call no tool accepts: a tool error the model reads.
    assert list(second.input) == [BAD_ARGUMENTS] and "{not json" in second.input[BAD_ARGUMENTS]
    assert list(third.input) == [BAD_ARGUMENTS]
    assert reply.usage == Usage(input_tokens=40, output_tokens=7, cache_read_input_tokens=60)


def test_length_is_max_tokens(chat_server: ChatServer) -> None:
    chat_server.enqueue(chat_text("cut", finish="length"))
    assert complete(provider(chat_server)).stop_reason == "max_tokens"


def test_streaming_hands_text_over_and_assembles_the_reply(chat_server: ChatServer) -> None:
    chat_server.enqueue(
        chat_tool_calls(
            call("fs_read_file", {"path": "some/long/path.txt"}, id="c9"),
            text="Let me look.",
            prompt_tokens=50,
            completion_tokens=9,
            cached_tokens=20,
        )
    )
    pieces: list[str] = []
    reply = complete(provider(chat_server), request(on_text=pieces.append))
    assert len(pieces) == 2 and "".join(pieces) == "Let me look." == reply.text
    assert reply.tool_calls[0].input == {"path": "some/long/path.txt"}
    assert reply.stop_reason == "tool_use"
    assert reply.usage == Usage(30, 9, 20, 0)
    body = chat_server.requests[-1].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_a_stream_cut_short_is_a_clear_error(chat_server: ChatServer) -> None:
    chunk = b'data: {"choices": [{"index": 0, "delta": {"content": "hal"}}]}\n\n'
    chat_server.enqueue(Response(body=chunk, content_type="text/event-stream"))
    with pytest.raises(ProviderError, match=r"malformed response.*before data: \[DONE\]"):
        complete(provider(chat_server), request(on_text=lambda _: None))


def sse(*chunks: object) -> bytes:
    """Server-sent events as Chat Completions sends them: each chunk a ``data:`` line
    (a dict as JSON, a str as it is)."""
    lines = [f"data: {c if isinstance(c, str) else json.dumps(c)}\n\n" for c in chunks]
    return "".join(lines).encode()


def piece(text: str) -> JsonDict:
    return {"model": "local-test", "choices": [{"index": 0, "delta": {"content": text}}]}


FINISH = {"model": "local-test", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}


@pytest.mark.parametrize("status", [429, 503])
def test_a_streamed_request_is_retried_after_retry_after(
    chat_server: ChatServer, status: int
) -> None:
    chat_server.enqueue(chat_error(status, "busy", retry_after=0.2), chat_text("ok then"))
    notes: list[str] = []
    pieces: list[str] = []
    reply = complete(provider(chat_server), request(notify=notes.append, on_text=pieces.append))
    assert reply.text == "ok then" == "".join(pieces)
    first, second = chat_server.requests
    assert first.body["stream"] is True and second.body["stream"] is True
    assert second.received_at - first.received_at >= 0.19
    assert len(notes) == 1 and f"HTTP {status}" in notes[0] and "busy" in notes[0]
    assert "attempt 2/5 in 0.2 s" in notes[0]


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ({"error": {"message": "the model crashed", "type": "server_error"}},
         "openai: error mid-stream: the model crashed"),
        ("{not json", r"openai: malformed response \(HTTP 200\): a chunk is not JSON"),
        ("[1, 2]", "a chunk is not a JSON object"),
    ],
)  # fmt: skip
def test_a_bad_chunk_mid_stream_is_a_clear_error_not_retried(
    chat_server: ChatServer, bad: object, why: str
) -> None:
    body = sse(piece("hal"), bad, piece("f"), FINISH, "[DONE]")
    chat_server.enqueue(Response(body=body, content_type="text/event-stream"), chat_text("no"))
    pieces: list[str] = []
    with pytest.raises(ProviderError, match=why) as info:
        complete(provider(chat_server), request(on_text=pieces.append))
    # The text before it was shown, and cannot be taken back: no second attempt.
    assert pieces == ["hal"] and len(chat_server.requests) == 1
    assert "\n" not in str(info.value)


def test_cancel_stops_a_streamed_call_mid_stream(chat_server: ChatServer) -> None:
    gate = threading.Event()
    chunks = (sse(piece("Thinking, ")), sse(piece("never shown."), FINISH, "[DONE]"))
    chat_server.enqueue(
        Response(body=b"", content_type="text/event-stream", chunks=chunks, gate=gate)
    )
    cancel = threading.Event()
    pieces: list[str] = []
    box: dict[str, BaseException] = {}

    def run() -> None:
        try:
            provider(chat_server).complete(request(on_text=pieces.append), cancel)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    try:
        wait_until(lambda: pieces == ["Thinking, "], message="the first words")
        cancelled_at = time.monotonic()
        cancel.set()
        thread.join(5)
        assert not thread.is_alive() and isinstance(box.get("error"), Cancelled)
        assert time.monotonic() - cancelled_at < 3.0
    finally:
        gate.set()  # the server's handler may end
    assert pieces == ["Thinking, "] and len(chat_server.requests) == 1


def test_429_waits_retry_after_and_says_so(chat_server: ChatServer) -> None:
    chat_server.enqueue(chat_error(429, "slow down", retry_after=0.2), chat_text("ok"))
    notes: list[str] = []
    reply = complete(provider(chat_server), request(notify=notes.append))
    assert reply.text == "ok"
    first, second = chat_server.requests
    assert second.received_at - first.received_at >= 0.19
    assert len(notes) == 1 and "HTTP 429" in notes[0] and "slow down" in notes[0]
    assert "attempt 2/5 in 0.2 s" in notes[0]


def test_500_is_retried_then_given_up(chat_server: ChatServer) -> None:
    chat_server.enqueue(*[chat_error(500, "boom")] * 3)
    with pytest.raises(ProviderError, match=r"openai: HTTP 500.*boom.*gave up after 3 attempts"):
        complete(provider(chat_server, max_retries=2))


def test_400_fails_at_once(chat_server: ChatServer) -> None:
    chat_server.enqueue(chat_error(400, "bad model"))
    with pytest.raises(ProviderError, match=r"HTTP 400.*bad model") as info:
        complete(provider(chat_server))
    assert "attempts" not in str(info.value) and len(chat_server.requests) == 1


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"<html>oops</html>", "body is not JSON"),
        (b'{"choices": "no"}', "no 'choices' list"),
        (b'{"choices": [{"message": {"content": 3}}]}', "content is not text"),
        (b'{"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}', "lacks its id"),
    ],
)
def test_garbage_bodies_are_clear_errors(chat_server: ChatServer, body: bytes, why: str) -> None:
    chat_server.enqueue(Response(body=body))
    with pytest.raises(ProviderError, match=f"openai: malformed response.*{why}"):
        complete(provider(chat_server))


def test_cancel_stops_a_slow_call_promptly(chat_server: ChatServer) -> None:
    chat_server.enqueue(chat_text("late", delay=10))
    cancel = threading.Event()
    box: dict[str, BaseException] = {}

    def run() -> None:
        try:
            provider(chat_server).complete(request(), cancel)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    chat_server.wait_for_requests(1)
    cancelled_at = time.monotonic()
    cancel.set()
    thread.join(5)
    assert not thread.is_alive() and isinstance(box.get("error"), Cancelled)
    assert time.monotonic() - cancelled_at < 3.0


def test_keys(chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ProviderError, match=r"OPENAI_API_KEY is not set.*base_url"):
        OpenAIProvider()
    monkeypatch.setenv("MY_GATEWAY_KEY", "gw-key")
    chat_server.enqueue(chat_text("a"), chat_text("b"), chat_text("c"))
    complete(OpenAIProvider(base_url=chat_server.url, api_key_env="MY_GATEWAY_KEY"))
    # A local server needs no key: a placeholder satisfies the SDK.
    complete(OpenAIProvider(base_url=chat_server.url))
    # OPENAI_BASE_URL is the SDK's own default.
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.url)
    complete(OpenAIProvider())
    auths = [r.headers["authorization"] for r in chat_server.requests]
    assert auths == ["Bearer gw-key", "Bearer unused", "Bearer unused"]


def test_openai_itself_gets_max_completion_tokens() -> None:
    p = OpenAIProvider(base_url="https://api.openai.com/v1")
    assert p.params(request(max_tokens=9))["max_completion_tokens"] == 9
