"""AnthropicProvider through the real SDK against the local Messages server.

The ``messages_server`` fixture comes from tests/conftest.py.
"""

from __future__ import annotations

import dataclasses
import email.utils
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jpfs.errors import Cancelled, ProviderError
from jpfs.infra.providers.anthropic import AnthropicProvider, _retry_after
from jpfs.infra.providers.base import Reply, Request, ToolSpec, Usage
from tests.messages_server import (
    MessagesServer,
    Response,
    Router,
    error_reply,
    malformed_reply,
    overloaded_reply,
    slow_reply,
    text_reply,
    tool_use,
    tool_use_reply,
)

REPO = Path(__file__).resolve().parents[3]
WORKER = "jpfs-anthropic-request"


def wait_until(predicate: Callable[[], bool], timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        threading.Event().wait(0.01)  # poll interval
    return True


def workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == WORKER]


@pytest.fixture(autouse=True)
def no_leaked_workers() -> Iterator[None]:
    yield
    assert wait_until(lambda: not workers()), f"request threads left running: {workers()}"


def provider(server: MessagesServer, **kwargs: Any) -> AnthropicProvider:
    kwargs.setdefault("backoff_base", 0.01)
    kwargs.setdefault("backoff_max", 0.05)
    return AnthropicProvider(api_key="test", base_url=server.url, **kwargs)


def request(**kwargs: Any) -> Request:
    kwargs.setdefault("model", "claude-test")
    kwargs.setdefault("system", "You are a test.")
    kwargs.setdefault("messages", [{"role": "user", "content": "hi"}])
    return Request(**kwargs)


def complete(p: AnthropicProvider, req: Request | None = None) -> Reply:
    return p.complete(req or request(), threading.Event())


class Background:
    """``complete`` in a thread, so the test can cancel it."""

    def __init__(self, p: AnthropicProvider, req: Request) -> None:
        self.cancel = threading.Event()
        self.result: Reply | BaseException | None = None
        self.finished_at = 0.0
        self._thread = threading.Thread(target=self._run, args=(p, req))
        self._thread.start()

    def _run(self, p: AnthropicProvider, req: Request) -> None:
        try:
            self.result = p.complete(req, self.cancel)
        except BaseException as exc:
            self.result = exc
        self.finished_at = time.monotonic()

    def join(self, timeout: float = 5.0) -> Reply | BaseException | None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "complete() did not return"
        return self.result


# --- replies --------------------------------------------------------------------------


def test_text_reply_with_usage(messages_server: MessagesServer) -> None:
    messages_server.enqueue(text_reply("hello", input_tokens=123, output_tokens=45, model="m-1"))
    reply = complete(provider(messages_server))
    assert reply.text == "hello"
    assert reply.tool_calls == ()
    assert reply.usage.input_tokens == 123
    assert reply.usage.output_tokens == 45
    assert reply.model == "m-1"
    assert reply.stop_reason == "end_turn"


def test_text_blocks_are_joined_and_cache_counts_are_kept_apart(
    messages_server: MessagesServer,
) -> None:
    body = text_reply("x").body
    body["content"] = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    body["usage"].update(cache_read_input_tokens=7, cache_creation_input_tokens=3)
    messages_server.enqueue(Response(body=body))
    reply = complete(provider(messages_server))
    assert reply.text == "ab"
    # The API's meanings: input excludes what was read from or written to the cache.
    assert reply.usage == Usage(10, 5, 7, 3)
    assert reply.usage.total == 25


def test_a_streamed_reply_keeps_the_cache_counts(messages_server: MessagesServer) -> None:
    messages_server.streaming = True
    messages_server.enqueue(text_reply("hi", input_tokens=4, cache_read=900, cache_write=60))
    shown: list[str] = []
    reply = complete(provider(messages_server), request(on_text=shown.append))
    assert shown == ["hi"] and reply.usage == Usage(4, 5, 900, 60)


def test_breakpoints_mark_tools_system_and_the_newest_message(
    messages_server: MessagesServer,
) -> None:
    messages_server.enqueue(text_reply("done"), text_reply("done"))
    spec = ToolSpec("a", "A.", {"type": "object"})
    history = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
        {"role": "user", "content": [{"type": "text", "text": "second"}]},
    ]
    req = request(
        system="S.", messages=history, tools=(spec, ToolSpec("b", "B.", spec.input_schema))
    )
    complete(provider(messages_server), req)
    body = messages_server.requests[0].body
    ephemeral = {"type": "ephemeral"}
    assert [t.get("cache_control") for t in body["tools"]] == [None, ephemeral]
    assert body["system"] == [{"type": "text", "text": "S.", "cache_control": ephemeral}]
    assert body["messages"][:2] == history[:2]  # a string content stays a string
    assert body["messages"][2]["content"] == [
        {"type": "text", "text": "second", "cache_control": ephemeral}
    ]
    assert history[2]["content"] == [{"type": "text", "text": "second"}]  # not changed
    # Off: the request is sent exactly as built.
    complete(provider(messages_server), dataclasses.replace(req, cache=False))
    assert "cache_control" not in json.dumps(messages_server.requests[1].body)


def test_two_tool_use_blocks_become_tool_calls(messages_server: MessagesServer) -> None:
    first = tool_use("read_file", {"path": "a.md"})
    second = tool_use("jp_query", {"q": "x", "n": 2})
    messages_server.enqueue(tool_use_reply(first, second, text="Let me look."))
    reply = complete(provider(messages_server))
    assert reply.text == "Let me look."
    assert reply.stop_reason == "tool_use"
    assert [(c.id, c.name, c.input) for c in reply.tool_calls] == [
        (first["id"], "read_file", {"path": "a.md"}),
        (second["id"], "jp_query", {"q": "x", "n": 2}),
    ]
    assert all(c.id.startswith("toolu_") for c in reply.tool_calls)


def test_request_body_carries_model_system_tools_and_tool_results(
    messages_server: MessagesServer,
) -> None:
    messages_server.enqueue(text_reply("done"))
    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    messages = [
        {"role": "user", "content": "read a.md"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "file body"},
            ],
        },
    ]
    req = request(
        model="claude-x",
        system="Be brief.",
        messages=messages,
        tools=(ToolSpec("read_file", "Read a file.", schema),),
        max_tokens=777,
    )
    complete(provider(messages_server), dataclasses.replace(req, cache=False))

    (sent,) = messages_server.requests
    assert sent.path == "/v1/messages"
    body = sent.body
    assert body["model"] == "claude-x"
    assert body["system"] == "Be brief."
    assert body["max_tokens"] == 777
    assert body["tools"] == [
        {"name": "read_file", "description": "Read a file.", "input_schema": schema}
    ]
    assert body["messages"] == messages
    assert not body.get("stream")
    assert "test" in (sent.headers.get("x-api-key", "") + sent.headers.get("authorization", ""))


def test_empty_system_and_no_tools_are_left_out(messages_server: MessagesServer) -> None:
    messages_server.enqueue(text_reply("ok"))
    complete(provider(messages_server), request(system=""))
    body = messages_server.requests[0].body
    assert "system" not in body
    assert "tools" not in body


# --- retries --------------------------------------------------------------------------


def test_429_honours_retry_after(messages_server: MessagesServer) -> None:
    messages_server.enqueue(error_reply(429, "slow down", retry_after=1), text_reply("ok"))
    assert complete(provider(messages_server)).text == "ok"
    first, second = messages_server.requests
    assert second.received_at - first.received_at >= 0.95


def test_retry_after_is_capped(messages_server: MessagesServer) -> None:
    messages_server.enqueue(error_reply(429, retry_after=3600), text_reply("ok"))
    assert complete(provider(messages_server, max_retry_after=0.1)).text == "ok"
    first, second = messages_server.requests
    assert second.received_at - first.received_at < 1


def test_529_overloaded_then_success(messages_server: MessagesServer) -> None:
    messages_server.enqueue(overloaded_reply(), overloaded_reply(), text_reply("ok"))
    assert complete(provider(messages_server)).text == "ok"
    assert len(messages_server.requests) == 3


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 529])
def test_retryable_statuses(messages_server: MessagesServer, status: int) -> None:
    messages_server.enqueue(error_reply(status), text_reply("ok"))
    assert complete(provider(messages_server)).text == "ok"
    assert len(messages_server.requests) == 2


def test_500_until_retries_run_out(messages_server: MessagesServer) -> None:
    messages_server.enqueue(*[error_reply(500, "boom") for _ in range(3)])
    with pytest.raises(ProviderError) as info:
        complete(provider(messages_server, max_retries=2))
    assert len(messages_server.requests) == 3
    message = str(info.value)
    assert "HTTP 500 api_error: boom" in message
    assert "3 attempts" in message
    assert "\n" not in message


def test_default_max_retries_is_4(messages_server: MessagesServer) -> None:
    messages_server.enqueue(*[overloaded_reply() for _ in range(5)])
    with pytest.raises(ProviderError, match="HTTP 529 overloaded_error: Overloaded"):
        complete(provider(messages_server))
    assert len(messages_server.requests) == 5


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_other_4xx_fail_at_once(messages_server: MessagesServer, status: int) -> None:
    messages_server.enqueue(error_reply(status, "max_tokens: too large"), text_reply("unused"))
    with pytest.raises(ProviderError) as info:
        complete(provider(messages_server))
    assert len(messages_server.requests) == 1
    assert f"HTTP {status}" in str(info.value)
    assert "max_tokens: too large" in str(info.value)
    assert not isinstance(info.value, Cancelled)


def test_server_can_veto_a_retry(messages_server: MessagesServer) -> None:
    messages_server.enqueue(error_reply(500, headers={"x-should-retry": "false"}), text_reply("x"))
    with pytest.raises(ProviderError, match="HTTP 500"):
        complete(provider(messages_server))
    assert len(messages_server.requests) == 1


def test_error_body_not_json_still_gives_a_message(messages_server: MessagesServer) -> None:
    messages_server.enqueue(Response(status=400, body=b"Bad Gateway\nsecond line"))
    with pytest.raises(ProviderError, match="HTTP 400: Bad Gateway second line"):
        complete(provider(messages_server))


def test_connection_refused_is_retried_then_fails() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    p = AnthropicProvider(
        api_key="test", base_url=f"http://127.0.0.1:{port}", max_retries=2, backoff_base=0.01
    )
    with pytest.raises(ProviderError, match=r"connection error.*3 attempts"):
        complete(p)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_parsing(header: dict[str, str], expected: float | None) -> None:
    assert _retry_after(header) == expected


def test_retry_after_http_date() -> None:
    value = email.utils.formatdate(time.time() + 30, usegmt=True)
    seconds = _retry_after({"retry-after": value})
    assert seconds is not None and 28 <= seconds <= 31


# --- malformed bodies -----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["json", "shape", "html"])
def test_malformed_body_is_a_provider_error(messages_server: MessagesServer, kind: str) -> None:
    messages_server.enqueue(malformed_reply(kind))
    with pytest.raises(ProviderError, match="malformed response"):
        complete(provider(messages_server))
    assert len(messages_server.requests) == 1


def test_tool_use_without_input_object_is_malformed(messages_server: MessagesServer) -> None:
    bad = {"type": "tool_use", "id": "toolu_1", "name": "x", "input": "nope"}
    messages_server.enqueue(tool_use_reply(bad))
    with pytest.raises(ProviderError, match="tool_use block"):
        complete(provider(messages_server))


# --- timeouts and cancellation --------------------------------------------------------


def test_cancel_during_slow_response(messages_server: MessagesServer) -> None:
    messages_server.enqueue(slow_reply(10))
    run = Background(provider(messages_server), request())
    messages_server.wait_for_requests(1)
    cancelled_at = time.monotonic()
    run.cancel.set()
    assert isinstance(run.join(), Cancelled)
    # Promptly: well before the 10 s reply (bounds with room for a loaded machine).
    assert run.finished_at - cancelled_at < 3.0
    # The abandoned HTTP attempt ends too (checked by the autouse fixture), promptly:
    assert wait_until(lambda: not workers(), timeout=3.0)


def test_cancel_during_retry_wait(messages_server: MessagesServer) -> None:
    messages_server.enqueue(error_reply(429, retry_after=30))
    run = Background(provider(messages_server), request())
    messages_server.wait_for_requests(1)
    cancelled_at = time.monotonic()
    run.cancel.set()
    assert isinstance(run.join(), Cancelled)
    assert run.finished_at - cancelled_at < 3.0  # not the 30 s wait (room for load)
    assert len(messages_server.requests) == 1


def test_cancel_set_before_the_call_sends_nothing(messages_server: MessagesServer) -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        provider(messages_server).complete(request(), cancel)
    assert messages_server.requests == []


def test_slow_response_beyond_timeout_is_retried(messages_server: MessagesServer) -> None:
    messages_server.enqueue(slow_reply(10), text_reply("second try"))
    reply = complete(provider(messages_server), request(timeout=0.3))
    assert reply.text == "second try"
    first, second = messages_server.requests
    assert 0.25 < second.received_at - first.received_at < 1
    assert len(messages_server.requests) == 2


def test_slow_response_beyond_timeout_every_time(messages_server: MessagesServer) -> None:
    messages_server.enqueue(slow_reply(10), slow_reply(10))
    with pytest.raises(ProviderError, match=r"timed out after 0\.3 s.*2 attempts"):
        complete(provider(messages_server, max_retries=1), request(timeout=0.3))
    # Both attempts timed out (the error says 2); on a loaded machine the second can time
    # out before the server has read it, so the server may have recorded only the first.
    first = messages_server.requests[0]
    assert len(messages_server.requests) in (1, 2)
    # Sent at the start of the call, so this bounds both attempts and the wait between.
    assert time.monotonic() - first.received_at < 1.5


def test_parallel_calls_are_isolated(messages_server: MessagesServer) -> None:
    """A parent and a child share one provider and one server; cancelling one
    leaves the other's request alone."""
    messages_server.responder = (
        Router()
        .on_system("parent", slow_reply(10))
        .on_system("child", text_reply("child done", delay=0.5))
    )
    p = provider(messages_server)
    parent = Background(p, request(system="You are the parent."))
    child = Background(p, request(system="You are the child."))
    messages_server.wait_for_requests(2)
    parent.cancel.set()
    assert isinstance(parent.join(), Cancelled)
    result = child.join()
    assert isinstance(result, Reply) and result.text == "child done"


# --- configuration --------------------------------------------------------------------


def test_missing_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ProviderError, match="ANTHROPIC_API_KEY"):
        AnthropicProvider()


def test_environment_key_and_base_url(
    messages_server: MessagesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-from-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", messages_server.url)
    messages_server.enqueue(text_reply("via env"))
    assert complete(AnthropicProvider()).text == "via env"
    headers = messages_server.requests[0].headers
    assert "sk-from-env" in headers.get("x-api-key", "") + headers.get("authorization", "")


def test_importing_the_provider_does_not_import_the_sdk() -> None:
    code = (
        "import sys, jpfs.infra.providers.anthropic, jpfs.infra.providers.command; "
        "assert 'anthropic' not in sys.modules, 'SDK imported eagerly'"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


# --- the fake server itself -----------------------------------------------------------


def test_router_falls_through_when_a_route_is_used_up(messages_server: MessagesServer) -> None:
    messages_server.responder = Router(default=lambda req: text_reply("default")).on_last_user(
        "ping", text_reply("pong")
    )
    p = provider(messages_server)
    ping = request(messages=[{"role": "user", "content": "ping"}])
    assert complete(p, ping).text == "pong"
    assert complete(p, ping).text == "default"


def test_a_responder_bug_is_reported_not_retried(messages_server: MessagesServer) -> None:
    def broken(req: dict[str, Any]) -> Response:
        raise KeyError("oops")

    messages_server.responder = broken
    with pytest.raises(ProviderError, match="responder raised KeyError"):
        complete(provider(messages_server))
    assert len(messages_server.requests) == 1
    assert isinstance(messages_server.errors[0], KeyError)
