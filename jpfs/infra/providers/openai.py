"""OpenAI-compatible servers (OpenAI, Ollama, vLLM, llama.cpp, LM Studio, gateways):
Chat Completions with tools, through the official ``openai`` SDK.

Imported lazily, like the anthropic SDK: only a run of an ``openai`` profile pays for
it. Retries, backoff and aborting an attempt are :mod:`.attempts`'s; the messages'
translation and the replies' checks are :mod:`.openai_reply`'s.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING

from jpfs.errors import ProviderError
from jpfs.infra.providers import attempts, openai_reply
from jpfs.infra.providers.anthropic_reply import one_line
from jpfs.infra.providers.base import JsonDict, Reply, Request

if TYPE_CHECKING:
    import httpx2
    import openai

CONVERSATION_HEADER = "x-jpfs-conversation"
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
# The SDK refuses an empty key; a local server (Ollama, llama.cpp) wants none.
PLACEHOLDER_KEY = "unused"
# OpenAI's own API refuses max_tokens on its reasoning models and takes
# max_completion_tokens on all; compatible servers (Ollama, llama.cpp, LM Studio) know
# max_tokens, not always the newer name.
_OPENAI_HOST = "api.openai.com"


class OpenAIProvider:
    """``complete`` through ``POST {base_url}/chat/completions``.

    ``base_url``: the profile's, else the SDK's ``OPENAI_BASE_URL``, else OpenAI. The key
    is read from the variable ``api_key_env`` names; with a base URL and no key, a
    placeholder is sent (local servers need none). Retries as the anthropic provider:
    408/409/429, 5xx, timeouts and connection errors, honouring ``retry-after``.
    Thread-safe: one provider serves concurrent calls.
    """

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key_env: str = DEFAULT_KEY_ENV,
        max_retries: int = 4,
        backoff_base: float = 1.0,
        backoff_max: float = 30.0,
        max_retry_after: float = 60.0,
        connect_timeout: float = 10.0,
    ) -> None:
        url = base_url or os.environ.get("OPENAI_BASE_URL", "").strip() or None
        key = os.environ.get(api_key_env, "").strip()
        if not key:
            if url is None:
                raise ProviderError(
                    f"{api_key_env} is not set: export your API key, or give the profile a"
                    " base_url (a local server such as Ollama: base_url ="
                    ' "http://localhost:11434/v1" needs no key)'
                )
            key = PLACEHOLDER_KEY
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        host = urllib.parse.urlsplit(url).hostname if url else _OPENAI_HOST
        self._tokens_param = "max_completion_tokens" if host == _OPENAI_HOST else "max_tokens"
        self.max_retries = max_retries
        self.backoff = attempts.Backoff(backoff_base, backoff_max, max_retry_after)
        self._clients = attempts.SdkClients(key, url, connect_timeout)

    def complete(self, request: Request, cancel: threading.Event) -> Reply:
        params = self.params(request)
        return attempts.retry(
            "openai",
            lambda: self._attempt(params, request.timeout, cancel, request.on_text),
            retries=self.max_retries,
            backoff=self.backoff,
            cancel=cancel,
            notify=request.notify,
        )

    def params(self, request: Request) -> JsonDict:
        """The Chat Completions request for ``request``. Prompt caching is the server's
        own (OpenAI caches long prefixes by itself): Chat Completions has no marks."""
        params: JsonDict = {
            "model": request.model,
            "messages": openai_reply.to_chat(request),
            self._tokens_param: request.max_tokens,
        }
        if request.tools:
            params["tools"] = openai_reply.tools(request)
        conversation = request.metadata.get("conversation")
        if conversation:
            # Which conversation a request is for, outside the prompt (as for anthropic).
            params["extra_headers"] = {CONVERSATION_HEADER: str(conversation)}
        return params

    def _attempt(
        self,
        params: JsonDict,
        timeout: float,
        cancel: threading.Event,
        on_text: Callable[[str], None] | None,
    ) -> Reply | attempts.Failure:
        try:
            import openai
        except ImportError as exc:
            raise ProviderError(f"the openai package is not installed ({exc})") from exc

        def work(client: openai.OpenAI, http_timeout: httpx2.Timeout) -> Reply:
            completions = client.chat.completions
            if on_text is None:
                raw = completions.with_raw_response.create(**params, timeout=http_timeout)
                response = raw.http_response
                return openai_reply.parse_reply(response.status_code, response.content)
            with completions.with_streaming_response.create(
                **params,
                stream=True,
                stream_options={"include_usage": True},
                timeout=http_timeout,
            ) as streamed:
                return openai_reply.read_stream(
                    streamed.status_code, streamed.iter_lines(), on_text
                )

        outcome = self._clients.attempt(
            openai.OpenAI,
            openai.DefaultHttpxClient,
            work,
            name="jpfs-openai-request",
            timeout=timeout,
            cancel=cancel,
            classify=_classify,
        )
        if isinstance(outcome, Reply | attempts.Failure):
            return outcome
        raise TypeError(f"unexpected attempt outcome {outcome!r}")


def load_sdk() -> None:
    """Import the SDK and what its first call loads now, off the path of a run (as
    :func:`jpfs.infra.providers.anthropic.load_sdk`)."""
    try:
        import httpx2  # noqa: F401
        import openai
    except ImportError:
        return  # the first call says so, as a ProviderError
    # The client loads its resources at their first use: the one a call uses, too.
    attempts.warm_transport(
        openai.DefaultHttpxClient,
        lambda http: openai.OpenAI(api_key="unused", http_client=http).chat.completions,
    )


def _classify(exc: BaseException) -> attempts.Failure:
    import openai

    if isinstance(exc, openai.APIStatusError):
        return _status_failure(exc)
    if isinstance(exc, openai.APITimeoutError):
        return attempts.Failure("request timed out", retryable=True, cause=exc)
    if isinstance(exc, openai.APIConnectionError):
        detail = f": {exc.__cause__}" if exc.__cause__ is not None else ""
        return attempts.Failure(one_line(f"connection error{detail}"), retryable=True, cause=exc)
    if isinstance(exc, openai.OpenAIError):
        return attempts.Failure(one_line(str(exc)), retryable=False, cause=exc)
    # Not the SDK's doing (ProviderError from the reply's checks, or a bug): as itself.
    raise exc


def _status_failure(exc: openai.APIStatusError) -> attempts.Failure:
    status = exc.status_code
    headers = exc.response.headers
    should_retry = headers.get("x-should-retry")
    if should_retry in ("true", "false"):
        retryable = should_retry == "true"
    else:
        retryable = status in (408, 409, 429) or status >= 500
    body = exc.body
    detail = ""
    if isinstance(body, dict):
        # OpenAI's shape is {"error": {"message": ...}}; the SDK unwraps it, others not.
        inner = body.get("error")
        found = inner.get("message") if isinstance(inner, dict) else body.get("message")
        detail = str(found or "") or json.dumps(body)
    elif body:
        detail = str(body)
    kind = exc.type or ""
    message = f"HTTP {status}" + (f" {kind}" if kind else "") + (f": {detail}" if detail else "")
    if exc.request_id:
        message += f" (request-id {exc.request_id})"
    return attempts.Failure(
        one_line(message), retryable, retry_after=attempts.retry_after(headers), cause=exc
    )
