"""Attempts at one model call over HTTP: retries, backoff, and aborting an attempt.

Shared by the providers that speak HTTP through an official SDK (``anthropic``,
``openai``). Retries are ours, not the SDK's (it gets ``max_retries=0``): the SDKs sleep
between attempts with ``time.sleep`` and cannot be interrupted, while a cancelled run
must stop within a fraction of a second, in a wait or mid-request. Each attempt runs in
a worker thread on its own HTTP client; a cancel or a blown deadline shuts the
attempt's sockets down, which wakes the worker at once (closing a socket does not wake
a thread blocked reading it; ``shutdown`` does), so an abandoned attempt never outlives
the call by more than a moment.
"""

from __future__ import annotations

import email.utils
import functools
import random
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jpfs.errors import Cancelled, ContextOverflow, ProviderError
from jpfs.infra.providers import overflow
from jpfs.infra.providers.base import Reply

if TYPE_CHECKING:
    import ssl

    import httpx2

# How often a waiting caller looks at the cancel flag and the attempt's deadline.
POLL_SECONDS = 0.05


@dataclass(frozen=True)
class Failure:
    """One failed attempt, before deciding whether to try again."""

    message: str
    retryable: bool
    retry_after: float | None = None
    cause: BaseException | None = None


class Connections:
    """The sockets one attempt opened, so that they can be shut down from another thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._aborted = False

    def on_request(self, request: httpx2.Request) -> None:
        # httpx event hook: ask the connection pool to report the connections it opens.
        request.extensions["trace"] = self._trace

    def _trace(self, event: str, info: Mapping[str, Any]) -> None:
        if event != "connection.connect_tcp.complete":
            return
        sock = info["return_value"].get_extra_info("socket")
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            self._sockets.append(sock)
            aborted = self._aborted
        if aborted:
            # The attempt was abandoned while still connecting.
            _shutdown(sock)

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed or never connected


@dataclass(frozen=True)
class Backoff:
    """How long to wait before attempt n+1: ``retry-after`` when the server sends it
    (capped at ``max_retry_after``), else ``base * 2**n`` (capped at ``cap``) with jitter."""

    base: float = 1.0
    cap: float = 30.0
    max_retry_after: float = 60.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            # The server knows when it can take us again; jitter would only make us early
            # or needlessly late. The cap keeps a bad header from parking the run for hours.
            return min(max(retry_after, 0.0), self.max_retry_after)
        delay = min(self.cap, self.base * 2.0 ** (attempt - 1))
        # Jitter spreads the retries of parallel agents that failed together.
        return delay * random.uniform(0.5, 1.0)


def retry(
    label: str,
    attempt: Callable[[], Reply | Failure],
    *,
    retries: int,
    backoff: Backoff,
    cancel: threading.Event,
    notify: Callable[[str], None] | None,
) -> Reply:
    """``attempt`` until it replies, a failure is not retryable, or ``retries`` retries
    are spent; ``notify`` is told of each wait. Raises ProviderError (prefixed ``label``)
    or Cancelled."""
    attempts = retries + 1
    for number in range(1, attempts + 1):
        if cancel.is_set():
            raise Cancelled("cancelled")
        outcome = attempt()
        if isinstance(outcome, Reply):
            return outcome
        failure = outcome
        if not failure.retryable or number == attempts:
            break
        delay = backoff.delay(number, failure.retry_after)
        if notify is not None:
            notify(f"{label}: {failure.message}; attempt {number + 1}/{attempts} in {delay:.1f} s")
        if cancel.wait(delay):
            raise Cancelled("cancelled")
    suffix = f" (gave up after {number} attempts)" if number > 1 else ""
    message = f"{label}: {failure.message}{suffix}"
    sizes = None if failure.retryable else overflow.parse(failure.message)
    if sizes is not None:
        raise ContextOverflow(message, *sizes) from failure.cause
    raise ProviderError(message) from failure.cause


def in_worker(
    work: Callable[[], Any],
    *,
    name: str,
    connections: Connections,
    timeout: float,
    cancel: threading.Event,
) -> Any | Failure:
    """``work()`` in a worker thread, given up on (its sockets shut down) on ``cancel``
    (Cancelled) or after ``timeout`` seconds (a retryable Failure). An exception
    ``work`` raised is returned, for the provider to classify."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # handed over to the calling thread
            box["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=run, name=name, daemon=True)
    deadline = time.monotonic() + timeout
    worker.start()
    while not done.wait(POLL_SECONDS):
        if cancel.is_set():
            connections.abort()
            raise Cancelled("cancelled")
        if time.monotonic() >= deadline:
            connections.abort()
            return Failure(f"request timed out after {timeout:g} s", retryable=True)
    worker.join()
    if "error" in box:
        error: BaseException = box["error"]
        return error
    return box["value"]


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asks us to wait: ``retry-after-ms``, or ``retry-after`` as
    seconds or an HTTP date. None when absent or unreadable."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return float(millis) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when.timestamp() - time.time()


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """The process's one SSL context for model calls: building one loads the CA bundle
    (~20 ms of CPU), and a provider is made per run. A context only verifies, so every
    client and thread can share it."""
    import httpx2

    return httpx2.create_ssl_context()


def warm_transport(
    http_client: Callable[..., Any], use: Callable[[Any], object] = lambda http: None
) -> None:
    """Load now what an SDK's first call would load on a run's path: the SSL context,
    the HTTP transport (a client's connection pool and HTTP/1.1 parser are imported
    when the first client is built: ~40 ms alone, 180 ms among a daemon's first runs)
    and the IDNA codec the socket layer loads at the first connection.
    ``http_client``: the SDK's ``DefaultHttpxClient``; ``use(http)``: what else the SDK
    loads at its first call, given that client (closed after)."""
    with http_client(verify=shared_ssl_context()) as http:
        use(http)
    "localhost".encode("idna")


class SdkClients:
    """An SDK's client for each attempt: the base client made once (with the shared SSL
    context: the base would otherwise build one of its own, never used), and a fresh
    HTTP client per attempt, whose sockets belong to that attempt alone, so an abort
    cannot touch a concurrent call's connection."""

    def __init__(self, api_key: str, base_url: str | None, connect_timeout: float) -> None:
        self.api_key = api_key
        self.base_url = base_url
        self.connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._base: Any = None
        self._ssl: ssl.SSLContext | None = None

    def attempt(
        self,
        sdk_client: Callable[..., Any],
        http_client: Callable[..., httpx2.Client],
        work: Callable[[Any, httpx2.Timeout], Any],
        *,
        name: str,
        timeout: float,
        cancel: threading.Event,
        classify: Callable[[BaseException], Failure],
    ) -> Any:
        """One attempt: ``work(client, http_timeout)`` in a worker thread
        (:func:`in_worker`) on a client of its own, closed after; an exception it raised
        comes back as ``classify`` words it. Anything else ``work`` returned comes back
        as it is, for the provider to read."""
        connections = Connections()
        client, http, http_timeout = self._for_attempt(
            sdk_client, http_client, connections, timeout
        )
        try:
            outcome = in_worker(
                lambda: work(client, http_timeout),
                name=name,
                connections=connections,
                timeout=timeout,
                cancel=cancel,
            )
        finally:
            http.close()
        return classify(outcome) if isinstance(outcome, BaseException) else outcome

    def _for_attempt(
        self,
        sdk_client: Callable[..., Any],
        http_client: Callable[..., httpx2.Client],
        connections: Connections,
        timeout: float,
    ) -> tuple[Any, httpx2.Client, httpx2.Timeout]:
        """``sdk_client``: the SDK's client class (``anthropic.Anthropic``,
        ``openai.OpenAI``); ``http_client``: the SDK's ``DefaultHttpxClient``. Returns the attempt's client,
        its HTTP client (close it after the attempt) and the timeout it was given."""
        import httpx2

        with self._lock:
            if self._base is None:
                self._ssl = shared_ssl_context()
                # The SDK's own retries are off: they sleep where a cancel cannot reach.
                self._base = sdk_client(
                    api_key=self.api_key,
                    base_url=self.base_url,
                    max_retries=0,
                    http_client=http_client(verify=self._ssl),
                )
            base, ssl_context = self._base, self._ssl
        # The attempt's deadline is enforced by in_worker; httpx's own read timeout is
        # only a backstop, a little later so that the two do not race to report it.
        http_timeout = httpx2.Timeout(timeout + 1.0, connect=min(timeout, self.connect_timeout))
        http = http_client(
            verify=ssl_context,
            timeout=http_timeout,
            event_hooks={"request": [connections.on_request]},
        )
        return base.with_options(http_client=http, max_retries=0), http, http_timeout
