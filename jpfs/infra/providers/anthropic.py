"""The Anthropic Messages API, through the official SDK.

The SDK is imported lazily (on the first ``complete``): importing it costs over a
second, and commands that never call a model (``jpfs conversation ls``) must not pay.
Retries, backoff and aborting an attempt (cancel, deadline) are
:mod:`jpfs.infra.providers.attempts`'s, shared with the ``openai`` provider.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from jpfs.errors import ProviderError
from jpfs.infra.providers import anthropic_reply, attempts
from jpfs.infra.providers.base import JsonDict, Reply, Request

if TYPE_CHECKING:
    import anthropic
    import httpx2

CONVERSATION_HEADER = "x-jpfs-conversation"


class AnthropicProvider:
    """``complete`` through ``POST /v1/messages``.

    ``max_retries`` retries follow the first attempt on 408/409/429, 5xx (529 overloaded
    included), timeouts and connection errors, waiting ``retry-after`` when the server
    sends it (capped at ``max_retry_after``), else ``backoff_base * 2**n`` (capped at
    ``backoff_max``) with jitter. Other 4xx fail at once. Thread-safe: one provider
    serves concurrent calls.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 4,
        backoff_base: float = 1.0,
        backoff_max: float = 30.0,
        max_retry_after: float = 60.0,
        connect_timeout: float = 10.0,
    ) -> None:
        key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY", "")
        if not key.strip():
            raise ProviderError(
                "ANTHROPIC_API_KEY is not set: export your Anthropic API key, or try jpfs"
                " offline with the scripted demo agent: `jpfs c set-agent ID demo` (a"
                " conversation that has not worked yet), `jpfs query --agent demo`, or"
                ' agent = "demo" in conversation.toml before saving task.md'
            )
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.max_retry_after = max_retry_after
        self._clients = attempts.SdkClients(
            key.strip(),
            base_url,
            connect_timeout,  # None: the SDK reads ANTHROPIC_BASE_URL
        )

    # -- the turn

    def complete(self, request: Request, cancel: threading.Event) -> Reply:
        params = _request_params(request)
        return attempts.retry(
            "anthropic",
            lambda: self._attempt(params, request.timeout, cancel, request.on_text),
            retries=self.max_retries,
            backoff=attempts.Backoff(self.backoff_base, self.backoff_max, self.max_retry_after),
            cancel=cancel,
            notify=request.notify,
        )

    def _attempt(
        self,
        params: JsonDict,
        timeout: float,
        cancel: threading.Event,
        on_text: Callable[[str], None] | None = None,
    ) -> Reply | attempts.Failure:
        try:
            import anthropic
        except ImportError as exc:
            raise ProviderError(f"the anthropic package is not installed ({exc})") from exc

        def work(client: anthropic.Anthropic, http_timeout: httpx2.Timeout) -> object:
            if on_text is None:
                raw = client.messages.with_raw_response.create(**params, timeout=http_timeout)
                return raw.http_response
            with client.messages.with_streaming_response.create(
                **params, stream=True, timeout=http_timeout
            ) as streamed:
                return anthropic_reply.read_stream(
                    streamed.status_code, streamed.iter_lines(), on_text
                )

        outcome = self._clients.attempt(
            anthropic.Anthropic,
            anthropic.DefaultHttpxClient,
            work,
            name="jpfs-anthropic-request",
            timeout=timeout,
            cancel=cancel,
            classify=_classify,
        )
        if isinstance(outcome, Reply | attempts.Failure):
            return outcome
        return anthropic_reply.parse_reply(outcome)


def _request_params(request: Request) -> JsonDict:
    params: JsonDict = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": request.messages,
    }
    if request.system:
        params["system"] = request.system
    if request.tools:
        params["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in request.tools
        ]
    if request.thinking is not None:
        params["thinking"] = request.thinking
    if request.effort is not None:
        params["output_config"] = {"effort": request.effort}
    if request.cache:
        mark_for_cache(params)
    conversation = request.metadata.get("conversation")
    if conversation:
        # Which conversation a request is for, outside the prompt (which must be the
        # same for all of a profile's conversations to share its cache): for proxies,
        # logs and test servers; the API ignores it.
        params["extra_headers"] = {CONVERSATION_HEADER: str(conversation)}
    return params


_EPHEMERAL: JsonDict = {"type": "ephemeral"}


def mark_for_cache(params: JsonDict) -> None:
    """Put prompt-caching breakpoints on ``params``: the last tool, the system prompt and
    the newest message's last block (3 of the API's 4).

    The API caches the prompt up to each breakpoint, in its order tools, system,
    messages. The fixed part is marked on its own so that it is read from cache even
    when the conversation differs (onboarding rounds, siblings of one profile); the
    newest message is marked so that the next call of a tool loop, whose prompt is this
    one plus a turn, reads all of this one from cache (the API looks for an earlier
    cached prefix up to 20 blocks back from a breakpoint). A fork, whose transcript
    begins with its parent's, reads that shared part from the parent's cache. The
    request's own messages are left as they are: the blocks marked are copies.
    """
    tools = params.get("tools")
    if tools:
        tools[-1] = {**tools[-1], "cache_control": _EPHEMERAL}
    system = params.get("system")
    if isinstance(system, str) and system:
        params["system"] = [{"type": "text", "text": system, "cache_control": _EPHEMERAL}]
    messages = params.get("messages") or []
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        content = message.get("content")
        if isinstance(content, str) and content:
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list) or not content:
            continue
        last = content[-1]
        if not isinstance(last, dict) or (last.get("type") == "text" and not last.get("text")):
            continue  # an empty text block cannot carry a breakpoint
        if last.get("type") in ("thinking", "redacted_thinking"):
            continue  # nor can thinking (it is cached with the blocks around it)
        marked = [*content[:-1], {**last, "cache_control": _EPHEMERAL}]
        messages = [*messages[:index], {**message, "content": marked}, *messages[index + 1 :]]
        params["messages"] = messages
        return


def _classify(exc: BaseException) -> attempts.Failure:
    import anthropic

    if isinstance(exc, anthropic.APIStatusError):
        return _status_failure(exc)
    if isinstance(exc, anthropic.APITimeoutError):
        which = f" ({type(exc.__cause__).__name__})" if exc.__cause__ is not None else ""
        return attempts.Failure(f"request timed out{which}", retryable=True, cause=exc)
    if isinstance(exc, anthropic.APIConnectionError):
        detail = f": {exc.__cause__}" if exc.__cause__ is not None else ""
        return attempts.Failure(
            anthropic_reply.one_line(f"connection error{detail}"), retryable=True, cause=exc
        )
    if isinstance(exc, anthropic.AnthropicError):
        return attempts.Failure(anthropic_reply.one_line(str(exc)), retryable=False, cause=exc)
    # Not the SDK's doing: a bug on our side, which must surface as itself.
    raise exc


def _status_failure(exc: anthropic.APIStatusError) -> attempts.Failure:
    status = exc.status_code
    headers = exc.response.headers
    should_retry = headers.get("x-should-retry")
    if should_retry in ("true", "false"):
        retryable = should_retry == "true"
    else:
        retryable = status in (408, 409, 429) or status >= 500
    kind = exc.type or ""
    detail = exc.api_message
    if not detail:
        body = exc.body
        detail = body if isinstance(body, str) else json.dumps(body) if body else ""
    message = f"HTTP {status}" + (f" {kind}" if kind else "") + (f": {detail}" if detail else "")
    if exc.request_id:
        message += f" (request-id {exc.request_id})"
    return attempts.Failure(
        anthropic_reply.one_line(message),
        retryable,
        retry_after=attempts.retry_after(headers),
        cause=exc,
    )


# The name tests knew it by, before it was shared.
_retry_after = attempts.retry_after


def load_sdk() -> None:
    """Import the SDK and what its first call loads now, off the path of a run: a daemon
    does once it is idle, so the first query or run handed to it does not pay for them
    (:func:`jpfs.infra.providers.attempts.warm_transport`)."""
    try:
        import anthropic
        import httpx2  # noqa: F401
    except ImportError:
        return  # the first call says so, as a ProviderError
    attempts.warm_transport(anthropic.DefaultHttpxClient)
    # The SDK imports OpenTelemetry's propagator at its first request (20-60 ms); a
    # propagator named by OTEL_PROPAGATORS that is not installed makes the import fail,
    # which the SDK reports itself at that request.
    with contextlib.suppress(Exception):  # the SDK's to report, at its first call
        import opentelemetry.propagate  # noqa: F401
