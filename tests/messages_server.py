"""A local HTTP server that speaks the Anthropic Messages API, for tests.

Tests drive the real SDK against it (``base_url=server.url``), never patch the SDK.
The server is scripted: enqueue responses, or set a responder function (a
:class:`Router` routes by system prompt or last user message, for a parent and its
children sharing one server). Every request is recorded with its JSON body and headers.

    def test_x(messages_server: MessagesServer) -> None:
        messages_server.enqueue(error_reply(529, retry_after=0), text_reply("hi"))
        provider = AnthropicProvider(api_key="test", base_url=messages_server.url)
        ...
        assert messages_server.requests[-1].json["model"] == "m"

``tests/conftest.py`` makes the fixture available everywhere with
``from tests.messages_server import messages_server``.

The conversation a request is for, from jpfs's ``x-jpfs-conversation`` header, is in
the parsed body under ``_conversation`` (:func:`conversation_of`), for responders that
answer a parent and its children differently.

Order of answers: the queue first, then the responder; with neither, a 400
``invalid_request_error`` naming the problem (400 is never retried, so a test that
forgot to script a reply fails at once with a readable message).

``stream: true`` requests get a 400 unless ``server.streaming`` is set (for clients
that always stream, such as Claude Code): then a scripted message is sent as the
API's server-sent events (``message_start`` ... ``message_stop``); errors stay JSON.

The server refuses what the API refuses (:mod:`tests.api_rules`: unpaired tool calls,
bad thinking settings and thinking blocks, too many cache breakpoints, a prompt over
the model's context window: ``prompt is too long: N tokens > M maximum`` ...) with the
API's error texts, before any scripted answer:
a refusal is recorded but consumes no queued reply and does not call the responder.
The rules are per model, ``server.models`` (``server.default_rules`` for other names).
When the model thinks, a scripted reply without a thinking block gets one, and any
unsigned thinking block (:func:`thinking_block`) is signed as the API would.
"""

from __future__ import annotations

import http.server
import itertools
import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import pytest

from tests import api_rules
from tests.api_rules import (
    MODELS,
    Accepted,
    ModelRules,
    Refusal,
    prompt_blocks,
    redacted_thinking_block,
    thinking_block,
    tokens,
)
from tests.api_thinking import decorate_reply

__all__ = [
    "ModelRules",
    "prompt_blocks",
    "redacted_thinking_block",
    "thinking_block",
]

JsonDict = dict[str, Any]

DEFAULT_MODEL = "claude-test"
# The conversation a request is for (jpfs sends it as the x-jpfs-conversation header,
# outside the prompt): put in the body that responders see and the server records.
CONVERSATION_KEY = "_conversation"

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class Response:
    """One scripted HTTP answer. ``body`` is JSON-encoded unless it is ``bytes``."""

    status: int = 200
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    # Seconds to wait before answering: a slow model. Stopping the server cuts it short.
    delay: float = 0.0
    content_type: str = "application/json"
    # A body sent in pieces: the first, then (once ``gate`` is set, at most 10 s later)
    # the rest; for tests that see a client act on a stream before it ends.
    chunks: tuple[bytes, ...] = ()
    gate: threading.Event | None = None

    def encoded(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        return json.dumps(self.body).encode()


# A responder sees the request's JSON body and answers with a Response (or a bare
# dict, meaning a 200 with that JSON body).
Answer = Response | JsonDict
Responder = Callable[[JsonDict], Answer]


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    # Header names lower-cased.
    headers: dict[str, str]
    raw: bytes
    # None when the body was not a JSON object.
    json: JsonDict | None
    received_at: float  # time.monotonic()

    @property
    def body(self) -> JsonDict:
        """The JSON body; fails the test if there was none."""
        assert self.json is not None, f"request body is not a JSON object: {self.raw[:200]!r}"
        return self.json


# --- reply builders -------------------------------------------------------------------

_ids = itertools.count(1)


def new_tool_use_id() -> str:
    return f"toolu_{next(_ids):024d}"


def _message(
    content: list[JsonDict],
    *,
    stop_reason: str,
    model: str,
    input_tokens: int,
    output_tokens: int,
    cache_read: int = 0,
    cache_write: int = 0,
) -> JsonDict:
    return {
        "id": f"msg_{next(_ids):024d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_read_input_tokens": cache_read,
            "cache_creation_input_tokens": cache_write,
        },
    }


def text_reply(
    text: str,
    *,
    model: str = DEFAULT_MODEL,
    input_tokens: int = 10,
    output_tokens: int = 5,
    stop_reason: str = "end_turn",
    delay: float = 0.0,
    cache_read: int = 0,
    cache_write: int = 0,
) -> Response:
    body = _message(
        [{"type": "text", "text": text}],
        stop_reason=stop_reason,
        model=model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read=cache_read,
        cache_write=cache_write,
    )
    return Response(body=body, delay=delay)


def tool_use(name: str, input: JsonDict | None = None, *, id: str | None = None) -> JsonDict:
    """One ``tool_use`` content block (an id is generated when none is given)."""
    return {"type": "tool_use", "id": id or new_tool_use_id(), "name": name, "input": input or {}}


def tool_use_reply(
    *calls: JsonDict | tuple[str, JsonDict],
    text: str = "",
    model: str = DEFAULT_MODEL,
    input_tokens: int = 10,
    output_tokens: int = 5,
    delay: float = 0.0,
    cache_read: int = 0,
    cache_write: int = 0,
) -> Response:
    """A reply calling one or more tools: ``tool_use_reply(("read", {"path": "a"}), ...)``
    or with blocks from :func:`tool_use` when the test needs to know the ids."""
    blocks: list[JsonDict] = [{"type": "text", "text": text}] if text else []
    for call in calls:
        blocks.append(tool_use(*call) if isinstance(call, tuple) else call)
    body = _message(
        blocks,
        stop_reason="tool_use",
        model=model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read=cache_read,
        cache_write=cache_write,
    )
    return Response(body=body, delay=delay)


def error_reply(
    status: int,
    message: str | None = None,
    *,
    error_type: str | None = None,
    retry_after: float | str | None = None,
    headers: Mapping[str, str] | None = None,
    delay: float = 0.0,
) -> Response:
    """An API error in Anthropic's shape; ``retry_after`` may be seconds or an HTTP date."""
    kind = error_type or _ERROR_TYPES.get(status, "api_error")
    all_headers = dict(headers or {})
    if retry_after is not None:
        value = retry_after if isinstance(retry_after, str) else f"{retry_after:g}"
        all_headers["retry-after"] = value
    body = {
        "type": "error",
        "error": {"type": kind, "message": message or kind.replace("_", " ").capitalize()},
    }
    return Response(status=status, body=body, headers=all_headers, delay=delay)


def overloaded_reply(retry_after: float | str | None = None) -> Response:
    return error_reply(529, "Overloaded", retry_after=retry_after)


def malformed_reply(kind: str = "json", *, status: int = 200) -> Response:
    """A broken success: ``"json"`` (invalid JSON), ``"shape"`` (JSON, but not a message),
    ``"html"`` (a proxy's error page with a text/html content type)."""
    if kind == "json":
        return Response(status=status, body=b'{"type": "message", "content": [')
    if kind == "shape":
        return Response(status=status, body={"type": "message", "content": "not a list"})
    if kind == "html":
        return Response(status=status, body=b"<html>oops</html>", content_type="text/html")
    raise ValueError(f"unknown malformed kind {kind!r}")


def slow_reply(delay: float, response: Response | None = None) -> Response:
    """``response`` (default: a text reply) after ``delay`` seconds."""
    base = response or text_reply("slow")
    return Response(base.status, base.body, base.headers, delay, base.content_type)


def sse_events(message: JsonDict) -> bytes:
    """A complete message as the Messages API streams it (server-sent events)."""
    events: list[tuple[str, JsonDict]] = []
    usage = dict(message.get("usage") or {})
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = {**usage, "output_tokens": 0}
    events.append(("message_start", {"type": "message_start", "message": start}))
    for index, block in enumerate(message.get("content") or []):
        kind = block.get("type")
        if kind == "text":
            opening: JsonDict = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block.get("text", "")}]
        elif kind == "tool_use":
            opening = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        elif kind == "thinking":
            opening = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": block.get("thinking", "")},
                      {"type": "signature_delta", "signature": block.get("signature", "")}]  # fmt: skip
        elif kind == "redacted_thinking":
            opening, deltas = block, []  # sent whole, as the API does
        else:
            raise ValueError(f"sse_events: cannot stream a {kind!r} block")
        events.append(
            ("content_block_start", {"type": "content_block_start", "index": index,
                                     "content_block": opening})
        )  # fmt: skip
        for delta in deltas:
            events.append(
                ("content_block_delta", {"type": "content_block_delta", "index": index,
                                         "delta": delta})
            )  # fmt: skip
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    stop = {"stop_reason": message.get("stop_reason"), "stop_sequence": None}
    events.append(
        ("message_delta", {"type": "message_delta", "delta": stop,
                           "usage": {"output_tokens": usage.get("output_tokens", 0)}})
    )  # fmt: skip
    events.append(("message_stop", {"type": "message_stop"}))
    return "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in events).encode()


def gated_text_stream(first: str, rest: str, gate: threading.Event) -> Response:
    """A streamed text reply whose ``first`` words are sent at once and whose ``rest``
    waits for ``gate``: a client that shows text as it arrives shows ``first`` early."""
    message = text_reply(first + rest).body
    events = sse_events(message).decode()
    blocks = events.split("\n\n")
    delta = next(i for i, b in enumerate(blocks) if b.startswith("event: content_block_delta"))
    head = blocks[:delta]
    whole = json.loads(blocks[delta].split("data: ", 1)[1])
    pieces = []
    for text in (first, rest):
        one = {**whole, "delta": {"type": "text_delta", "text": text}}
        pieces.append(f"event: content_block_delta\ndata: {json.dumps(one)}")
    chunk0 = "\n\n".join([*head, pieces[0]]) + "\n\n"
    chunk1 = "\n\n".join([pieces[1], *blocks[delta + 1 :]])
    return Response(
        200, b"", content_type="text/event-stream", chunks=(chunk0.encode(), chunk1.encode()),
        gate=gate,
    )  # fmt: skip


def _with_cache_usage(response: Response, counts: dict[str, int]) -> Response:
    body = response.body
    if response.status != 200 or not isinstance(body, dict) or body.get("type") != "message":
        return response
    usage = {**(body.get("usage") or {}), **counts}
    return Response(
        response.status, {**body, "usage": usage}, response.headers, response.delay,
        response.content_type, response.chunks, response.gate,
    )  # fmt: skip


def _streamed(response: Response) -> Response:
    """``response`` as an event stream when it is a successful message; else unchanged."""
    if response.chunks:
        return response
    body = response.body
    if response.status != 200 or not isinstance(body, dict) or body.get("type") != "message":
        return response
    return Response(
        response.status, sse_events(body), response.headers, response.delay, "text/event-stream"
    )


# --- reading requests -----------------------------------------------------------------


def _block_text(block: Any) -> str:
    if isinstance(block, str):
        return block
    if not isinstance(block, dict):
        return ""
    if block.get("type") == "text":
        return str(block.get("text", ""))
    if block.get("type") == "tool_result":
        content = block.get("content", "")
        if isinstance(content, list):
            return "\n".join(_block_text(b) for b in content)
        return str(content)
    return ""


def content_text(content: Any) -> str:
    """The text of a message's content (a string or a list of blocks)."""
    if isinstance(content, list):
        return "\n".join(t for t in (_block_text(b) for b in content) if t)
    return _block_text(content)


def conversation_of(request: JsonDict) -> str:
    """The conversation a request was made for (jpfs names it in a header)."""
    found = request.get(CONVERSATION_KEY)
    assert isinstance(found, str) and found, f"no {CONVERSATION_KEY} in the request"
    return found


def system_text(request: JsonDict) -> str:
    return content_text(request.get("system", ""))


def last_user_text(request: JsonDict) -> str:
    """Text of the last user message, tool results included."""
    for message in reversed(request.get("messages", [])):
        if message.get("role") == "user":
            return content_text(message.get("content", ""))
    return ""


def tool_results(request: JsonDict) -> list[JsonDict]:
    """Every ``tool_result`` block the request sends, in order."""
    found: list[JsonDict] = []
    for message in request.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            found.extend(
                b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"
            )
    return found


# --- prompt caching -------------------------------------------------------------------


# The stand-in tokenizer (about four characters of JSON per token), by its old name.
_tokens = tokens


class PromptCache:
    """Prompt caching as the Messages API does it, for usage that tests can check.

    A prefix of the prompt is written to the cache at each breakpoint (a block with
    ``cache_control``) and read back by a later request that starts with it; the reply's
    usage says how many input tokens were read from cache, written to it, and sent fresh
    (after the last breakpoint). ``min_tokens``: shorter prefixes are not cached, as the
    API does not cache below 1,024 tokens on most models."""

    def __init__(self, min_tokens: int = 0) -> None:
        self.min_tokens = min_tokens
        self._lock = threading.Lock()
        self._prefixes: set[str] = set()

    def usage(self, request: JsonDict) -> dict[str, int]:
        import hashlib

        blocks = prompt_blocks(request)
        sizes = [_tokens(b) for b, _ in blocks]
        digest = hashlib.sha256()
        keys: list[str] = []
        for block, _ in blocks:
            digest.update(json.dumps(block, sort_keys=True).encode())
            keys.append(digest.hexdigest())
        marks = [i for i, (_, marked) in enumerate(blocks) if marked]
        total = sum(sizes)
        if not marks:
            return {"input_tokens": total, "cache_read_input_tokens": 0,
                    "cache_creation_input_tokens": 0}  # fmt: skip
        last = marks[-1]
        with self._lock:
            hit = max((i for i in range(last + 1) if keys[i] in self._prefixes), default=-1)
            read = sum(sizes[: hit + 1])
            cached_upto = sum(sizes[: last + 1])
            written = 0
            if cached_upto >= self.min_tokens:
                written = cached_upto - read
                self._prefixes.update(keys[i] for i in marks)
            else:
                read = 0
        fresh = total - read - written
        return {"input_tokens": fresh, "cache_read_input_tokens": read,
                "cache_creation_input_tokens": written}  # fmt: skip


# --- routing --------------------------------------------------------------------------


class Router:
    """A responder that picks a reply by what the request says.

    Each route has a predicate and either a queue of replies (consumed in order; an
    exhausted route no longer matches, so later routes or the default get the request)
    or one responder function (never exhausted). Routes are tried in the order added.

        router = (
            Router()
            .on_system("You are the parent", tool_use_reply(("fork", {...})), text_reply("done"))
            .on_last_user("child task", text_reply("child done"))
        )
        messages_server.responder = router
    """

    def __init__(self, default: Responder | None = None) -> None:
        self._lock = threading.Lock()
        self._routes: list[tuple[Callable[[JsonDict], bool], deque[Answer] | Responder]] = []
        self._default = default

    def when(self, predicate: Callable[[JsonDict], bool], *replies: Answer | Responder) -> Router:
        if len(replies) == 1 and callable(replies[0]):
            self._routes.append((predicate, replies[0]))
        else:
            if any(callable(r) for r in replies):
                raise TypeError("a route takes either one responder function or replies")
            self._routes.append((predicate, deque(replies)))  # type: ignore[arg-type]
        return self

    def on_system(self, contains: str, *replies: Answer | Responder) -> Router:
        return self.when(lambda req: contains in system_text(req), *replies)

    def on_last_user(self, contains: str, *replies: Answer | Responder) -> Router:
        return self.when(lambda req: contains in last_user_text(req), *replies)

    def __call__(self, request: JsonDict) -> Answer:
        with self._lock:
            for predicate, target in self._routes:
                if not predicate(request):
                    continue
                if isinstance(target, deque):
                    if target:
                        return target.popleft()
                    continue
                return target(request)
        if self._default is not None:
            return self._default(request)
        system, last = system_text(request)[:80], last_user_text(request)[:80]
        return error_reply(
            400, f"messages_server: no route matched (system={system!r}, last user={last!r})"
        )


# --- the API's rules ------------------------------------------------------------------

# What the server does to an answer the rules let through (given the request's number).
Finish = Callable[[Response, int], Response]


def _finish(
    request: JsonDict, rules: ModelRules, checked: Accepted, response: Response, number: int
) -> Response:
    """A scripted message as the API sends it: thinking added and signed, the dropped
    thinking blocks listed, the prompt's size as input usage for ``count_usage`` models."""
    body = response.body
    if response.status != 200 or not isinstance(body, dict) or body.get("type") != "message":
        return response
    model = str(request.get("model"))
    body = decorate_reply(
        request, body, model=model, thinking_on=checked.thinking_on, shown=checked.shown,
        number=number,
    )  # fmt: skip
    if checked.transformations:
        body["input_transformations"] = checked.transformations
    if rules.count_usage:
        usage = body["usage"]
        cached = int(usage.get("cache_read_input_tokens") or 0)
        cached += int(usage.get("cache_creation_input_tokens") or 0)
        usage["input_tokens"] = max(0, checked.prompt_tokens - cached)
    return Response(
        response.status, body, response.headers, response.delay, response.content_type,
        response.chunks, response.gate,
    )  # fmt: skip


# --- the server -----------------------------------------------------------------------


class _HTTPServer(http.server.ThreadingHTTPServer):
    # Handler threads are joined on close (no thread outlives the server) ...
    daemon_threads = False
    block_on_close = True
    owner: MessagesServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # ... and a client that hung up mid-answer (a cancelled request) is not an
        # error worth a traceback on stderr.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        if len(raw) < length:
            # The client went away mid-request (a daemon SIGKILLed while sending): no
            # request reached the model, so none is recorded or answered.
            self.close_connection = True
            return
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        conversation = self.headers.get("x-jpfs-conversation")
        if isinstance(parsed, dict) and conversation:
            parsed[CONVERSATION_KEY] = conversation
        recorded = RecordedRequest(
            method="POST",
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            raw=raw,
            json=parsed if isinstance(parsed, dict) else None,
            received_at=time.monotonic(),
        )
        self._send(self.server.owner._answer(recorded))

    def do_GET(self) -> None:
        self._send(error_reply(404, f"messages_server: no route for GET {self.path}"))

    def _send(self, response: Response) -> None:
        if response.delay > 0 and self.server.owner._stopping.wait(response.delay):
            return
        payload = response.encoded()
        self.send_response(response.status)
        self.send_header("content-type", response.content_type)
        if response.chunks:
            self._send_chunks(response)
            return
        self.send_header("content-length", str(len(payload)))
        self.send_header("request-id", f"req_test_{next(_ids)}")
        for name, value in response.headers.items():
            self.send_header(name, value)
        # One request per connection: no idle keep-alive handler thread to wait for on stop.
        self.send_header("connection", "close")
        self.close_connection = True
        self.end_headers()
        try:
            self.wfile.write(payload)
        except OSError:
            pass  # the client gave up (cancelled); nothing to tell it

    def _send_chunks(self, response: Response) -> None:
        # No content-length: the body ends when the connection closes.
        self.send_header("connection", "close")
        self.close_connection = True
        self.end_headers()
        try:
            self.wfile.write(response.chunks[0])
            self.wfile.flush()
            if response.gate is not None:
                response.gate.wait(10.0)
            for chunk in response.chunks[1:]:
                self.wfile.write(chunk)
            self.wfile.flush()
        except OSError:
            pass


class MessagesServer:
    """Scripted Messages API on 127.0.0.1 (a free port); use as a context manager."""

    def __init__(self) -> None:
        # Answer ``stream: true`` requests with server-sent events (see the module doc).
        self.streaming = False
        self._lock = threading.Condition()
        self._queue: deque[Answer] = deque()
        self._requests: list[RecordedRequest] = []
        self._stopping = threading.Event()
        self.responder: Responder | None = None
        # When set, a successful message's input usage is what this cache says of the
        # request (fresh input, cache reads and writes); its output_tokens are kept.
        self.prompt_cache: PromptCache | None = None
        # Exceptions the responder raised, for tests that want to re-raise them.
        self.errors: list[Exception] = []
        # What each model accepts (tests add their own); other names get default_rules.
        self.models: dict[str, ModelRules] = dict(MODELS)
        self.default_rules = ModelRules()
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Self:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="messages-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()  # joins the handler threads

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- scripting

    def enqueue(self, *replies: Answer) -> None:
        """Replies for the next requests, in order (before any responder)."""
        with self._lock:
            self._queue.extend(replies)

    @property
    def pending(self) -> int:
        """Queued replies not yet sent."""
        with self._lock:
            return len(self._queue)

    def rules(self, model: Any) -> ModelRules:
        """The rules the server applies to requests for ``model``."""
        return api_rules.rules_for(self.models, self.default_rules, model)

    def _check(self, request: RecordedRequest) -> Refusal | Finish:
        """The API's refusal of ``request``, or what to do to its answer."""
        body = request.json
        if body is None or request.path.split("?")[0] != "/v1/messages":
            return lambda response, number: response
        rules = self.rules(body.get("model"))
        betas = [b.strip() for b in request.headers.get("anthropic-beta", "").split(",")]
        checked = api_rules.check_messages(body, rules, betas)
        if isinstance(checked, Refusal):
            return checked
        return lambda response, number: _finish(body, rules, checked, response, number)

    def _refusal(self, refusal: Refusal) -> Response:
        return error_reply(refusal.status, refusal.message, error_type=refusal.kind)

    def _answer(self, request: RecordedRequest) -> Response:
        checked = self._check(request)
        with self._lock:
            self._requests.append(request)
            number = len(self._requests)
            self._lock.notify_all()
            if isinstance(checked, Refusal):
                return self._refusal(checked)
            queued = self._queue.popleft() if self._queue else None
        answer: Answer
        stream = request.json is not None and bool(request.json.get("stream"))
        if stream and not self.streaming:
            answer = error_reply(400, "messages_server: stream=true is not supported")
        elif queued is not None:
            answer = queued
        elif request.json is None:
            answer = error_reply(400, "messages_server: request body is not a JSON object")
        elif self.responder is not None:
            try:
                answer = self.responder(request.json)
            except Exception as exc:
                # Surfaces in the test as a ProviderError naming the bug (400: no retry).
                with self._lock:
                    self.errors.append(exc)
                answer = error_reply(400, f"messages_server: responder raised {exc!r}")
        else:
            answer = error_reply(400, "messages_server: no scripted response left")
        response = answer if isinstance(answer, Response) else Response(body=answer)
        if self.prompt_cache is not None and request.json is not None:
            response = _with_cache_usage(response, self.prompt_cache.usage(request.json))
        response = checked(response, number)
        if not (stream and self.streaming):
            return response
        try:
            return _streamed(response)
        except ValueError as exc:
            with self._lock:
                self.errors.append(exc)
            return error_reply(400, f"messages_server: {exc}")

    # -- inspection

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def bodies(self) -> list[JsonDict]:
        return [r.body for r in self.requests]

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> Sequence[RecordedRequest]:
        """Block until at least ``count`` requests arrived; fail the test after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self._requests) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"messages_server: {len(self._requests)} requests after {timeout} s, "
                        f"expected {count}"
                    )
                self._lock.wait(remaining)
            return list(self._requests)


@pytest.fixture
def messages_server() -> Iterator[MessagesServer]:
    with MessagesServer() as server:
        yield server
