"""The daemon's side of ``jpfs query`` handed over (:mod:`jpfs.services.run.handoff`).

One thread accepts on ``.jpfs/local/query.sock``; each connection gets a thread that
reads one request, checks it against :data:`SCHEMA` and runs it with
:func:`jpfs.services.run.query.run_request`, the function an in-process ``jpfs query`` calls: the
same scope checks, conversation lock, commits and trailers. The run's text and notes
go back as JSON lines while it runs. The client closing the connection (Ctrl-C)
cancels the run; a daemon stopping stops it between steps, as it stops its own runs.

The socket is created 0600 and each peer's uid is checked (``SO_PEERCRED``): only the
daemon's user may hand it work. A socket file left by a killed daemon is replaced at
the next start (the daemon lock says no other daemon owns it).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import struct
import threading
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jpfs.core import conversation, secrets
from jpfs.core.workspace import Workspace
from jpfs.errors import Cancelled, JpfsError, RepositoryFault
from jpfs.services.run import handoff, query
from jpfs.services.run.runtime import Runner

log = logging.getLogger("jpfs.services.daemon")

READ_TIMEOUT = 10.0  # a client that connects and sends no request line in time is dropped
_JSON_TYPES: dict[object, str] = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}


def request_schema(cls: type[Any]) -> tuple[dict[str, Any], list[str]]:
    """The JSON schema of a request dataclass's fields, and the names it requires.

    Each field's type (a scalar, or a union of scalars with ``None``) becomes its
    ``type``; ``metadata["schema"]`` adds to it (``minimum``), or replaces it when it
    says the values (``enum``, ``const``). A field without a default is required. So a
    field added to the request is one the daemon accepts, checked by its type."""
    hints = typing.get_type_hints(cls)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for spec in dataclasses.fields(cls):
        given = dict(spec.metadata.get("schema", {}))
        if "enum" in given or "const" in given:
            properties[spec.name] = given
        else:
            names = [_JSON_TYPES[t] for t in typing.get_args(hints[spec.name])] or [
                _JSON_TYPES[hints[spec.name]]
            ]
            properties[spec.name] = {"type": names[0] if len(names) == 1 else names, **given}
        if spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
            required.append(spec.name)
    return properties, required


_REQUEST, _REQUIRED = request_schema(handoff.QueryRequest)
# The request (handoff.QueryRequest) in the envelope the client sends it in
# (handoff.hand_over).
SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["v", *_REQUIRED, "cfg", "env"],
    "properties": {
        "v": {"const": handoff.VERSION},
        **_REQUEST,
        "stream": {"type": "boolean"},
        "cfg": {"type": "array", "items": {"type": "string"}},
        "env": {"type": "string"},
    },
}


class BadRequest(JpfsError):
    pass


@dataclasses.dataclass(frozen=True)
class Handed:
    """A request as it came over the socket: the query, and how the client runs."""

    request: handoff.QueryRequest
    stream: bool  # the client shows the answer as it streams
    cfg: tuple[str, ...]  # its --cfg layers
    env: str  # its environment's digest (handoff.env_digest)


def parse(line: bytes) -> Handed:
    """The request in ``line``, or :class:`BadRequest` saying what is wrong with it."""
    import jsonschema

    try:
        message = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"bad request: not JSON ({exc})") from None
    errors = sorted(
        jsonschema.Draft202012Validator(SCHEMA).iter_errors(message), key=lambda e: e.path
    )
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path)
        raise BadRequest(f"bad request: {where + ': ' if where else ''}{errors[0].message}")
    assert isinstance(message, dict)
    return Handed(
        handoff.QueryRequest(**{k: v for k, v in message.items() if k in _REQUEST}),
        stream=bool(message.get("stream", False)),
        cfg=tuple(message["cfg"]),
        env=str(message["env"]),
    )


def used_providers(ws: Workspace) -> list[str]:
    """The providers of the profiles in ``agents.allowed`` and, down the tree, of the
    agents each may call: what a handed-over query may run. A profile named nowhere
    (the shipped openai examples, until allowed) is not one of them.

    Read as they are (the branch's copy, else the kept one), not through the policy's
    loader: a warm-up must not keep copies or leave notes in ``jpfs daemon status``
    (a note is cleared only by a run of that profile, which may never come)."""
    from jpfs.core import profiles
    from jpfs.services.workspace import policy

    kinds: dict[str, None] = {}
    seen: set[str] = set()
    todo = list(ws.config.agents_allowed)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for where in (ws.agents_dir, policy.kept_agents(ws)):
            try:
                config = profiles.load(where, name).settings
            except (OSError, JpfsError):
                continue  # missing or broken here: its runs say so
            kinds[config.provider] = None
            todo.extend(config.tools.agents)
            break
    return list(kinds)


class Connection:
    """One client: its socket, written from the run's threads, and its run's cancel."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.cancel = threading.Event()
        self._send_lock = threading.Lock()

    def send(self, message: Mapping[str, Any]) -> None:
        """Best effort: a client that went away cancels the run instead of failing it."""
        with self._send_lock:
            try:
                self.sock.sendall(handoff.encode(message))
            except OSError:
                self.cancel.set()

    def read_request(self) -> bytes:
        self.sock.settimeout(READ_TIMEOUT)
        buf = b""
        while b"\n" not in buf:
            if len(buf) > handoff.MAX_LINE:
                raise BadRequest(f"bad request: longer than {handoff.MAX_LINE} bytes")
            chunk = self.sock.recv(65536)
            if not chunk:
                raise BadRequest("bad request: the connection ended before a full line")
            buf += chunk
        self.sock.settimeout(None)
        return buf.split(b"\n", 1)[0]

    def watch_hangup(self) -> None:
        """Set :attr:`cancel` when the client closes its end (the client sends nothing
        after its request, so any end of input is the client going away)."""
        try:
            while self.sock.recv(4096):
                pass
        except OSError:
            pass
        self.cancel.set()


class QueryServer:
    def __init__(
        self,
        ws: Workspace,
        *,
        cfg: Sequence[str],
        runner: Callable[..., Runner],
        stopping: threading.Event,
        on_error: Callable[[str], None],
        idle: Callable[[], bool] = lambda: True,
        after_warm: Callable[[], None] = lambda: None,
    ) -> None:
        self.ws = ws
        self.cfg = list(cfg)
        self.env = handoff.env_digest(os.environ)
        self.runner = runner  # the daemon's runner factory
        self.stopping = stopping
        self.on_error = on_error
        self.idle = idle  # the daemon has caught up: time to load the model's SDK
        self.after_warm = after_warm  # the daemon process's: process.settle_heap
        self.path = ws.ensure_local() / handoff.SOCKET
        self._listener: socket.socket | None = None
        self._threads: set[threading.Thread] = set()
        self._connections: set[Connection] = set()
        self._lock = threading.Lock()
        self._accepting: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.path.unlink(missing_ok=True)  # a killed daemon's; the daemon lock is ours
        with handoff.socket_address(self.path.parent) as address:
            listener.bind(address)
        os.chmod(self.path, 0o600)
        listener.listen(16)
        self._listener = listener
        self._accepting = threading.Thread(
            target=self._accept, args=(listener,), name="jpfs-queries", daemon=True
        )
        self._accepting.start()
        log.info("taking queries on %s", self.path)
        threading.Thread(target=self._warm, name="jpfs-sdk-warm-up", daemon=True).start()

    def _warm(self) -> None:
        """Import the SDKs of the providers this workspace's runs use once the daemon is
        idle (not while it catches up, which it would slow down), and what their first
        call loads, so that no handed-over query or first run waits for an import. Not
        anthropic's without an API key: no anthropic run can start here then. Then
        ``after_warm`` (the daemon process settles its heap)."""
        while not self.idle():
            if self.stopping.wait(0.2):
                return
        # What every run loads on its way to its first model call, too: the secret
        # patterns its brief is redacted with, and what its adoption writes
        # conversation.toml with (runs starting together would each wait for them).
        secrets.prepare()
        conversation.prepare_writes()

        from jpfs.infra import providers

        loaded = []
        for kind in used_providers(self.ws):
            if kind == "anthropic" and not os.environ.get("ANTHROPIC_API_KEY", "").strip():
                continue
            if providers.load_sdk(kind):
                loaded.append(kind)
        self.after_warm()
        if loaded:
            log.info("SDKs loaded for handed-over queries: %s", ", ".join(sorted(loaded)))

    def close(self, force: threading.Event, timeout: float = 30.0) -> None:
        """Stop taking queries; runs in flight stop between steps (all at once on
        ``force``); their clients are told."""
        listener, self._listener = self._listener, None
        if listener is None:
            return
        self.path.unlink(missing_ok=True)
        try:
            listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
        except OSError:
            pass
        listener.close()
        if self._accepting is not None:
            self._accepting.join()
        pause = threading.Event()
        for _ in range(int(timeout / 0.05)):
            with self._lock:
                threads = [t for t in self._threads if t.is_alive()]
                if force.is_set():
                    for conn in self._connections:
                        conn.cancel.set()
            if not threads:
                return
            pause.wait(0.05)
        log.warning("%d handed-over quer(ies) still running at shutdown", len(threads))

    # -- connections ----------------------------------------------------------------------
    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return  # closed
            thread = threading.Thread(
                target=self._serve, args=(sock,), name="jpfs-query", daemon=True
            )
            with self._lock:
                self._threads = {t for t in self._threads if t.is_alive()} | {thread}
            thread.start()

    def _serve(self, sock: socket.socket) -> None:
        conn = Connection(sock)
        with self._lock:
            self._connections.add(conn)
        try:
            if not self._same_user(sock):
                log.warning("refused a query from another user")
                return
            try:
                handed = parse(conn.read_request())
            except (BadRequest, OSError) as exc:
                message = str(exc) if isinstance(exc, BadRequest) else f"bad request: {exc}"
                log.warning("query socket: %s", message)
                conn.send({"type": "error", "kind": "BadRequest", "message": message, "exit": 2})
                return
            reason = self._declines(handed)
            if reason:
                log.info("query not taken (%s): the client runs it itself", reason)
                conn.send({"type": "declined", "reason": reason})
                return
            self._run(conn, handed)
        finally:
            with self._lock:
                self._connections.discard(conn)
            try:
                sock.shutdown(socket.SHUT_RDWR)  # ends watch_hangup's recv
            except OSError:
                pass
            sock.close()

    @staticmethod
    def _same_user(sock: socket.socket) -> bool:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        return bool(uid == os.getuid())

    def _declines(self, handed: Handed) -> str:
        """Why this daemon would not run ``handed`` as the client would ("" if it would)."""
        if self.stopping.is_set():
            return "the daemon is stopping"
        if list(handed.cfg) != self.cfg:
            return "other --cfg layers than the daemon's"
        if handed.env != self.env:
            return "another environment than the daemon's"
        return ""

    def _run(self, conn: Connection, handed: Handed) -> None:
        watcher = threading.Thread(target=conn.watch_hangup, name="jpfs-query-hangup", daemon=True)
        started: list[str] = []

        def runner_for(target: str) -> Runner:
            started.append(target)
            conn.send({"type": "start", "conversation": target})
            watcher.start()
            log.info("%s: query handed over by the CLI", target)
            return self.runner(
                cancel=conn.cancel,
                lock_wait=self.ws.config.query_lock_wait,
                progress=lambda text: conn.send({"type": "note", "text": text}),
            )

        def on_text(text: str | None) -> None:
            conn.send({"type": "turn"} if text is None else {"type": "text", "text": text})

        try:
            outcome = query.run_request(
                self.ws, handed.request, runner_for, on_text=on_text if handed.stream else None
            )
        except Cancelled as exc:
            where = started[0] if started else "query"
            if conn.cancel.is_set():
                log.info("%s: handed-over run cancelled: the client went away", where)
            conn.send({"type": "error", "kind": "Cancelled", "message": str(exc), "exit": 130})
            return
        except JpfsError as exc:
            if isinstance(exc, RepositoryFault):
                self.on_error(f"query: {exc}")
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            conn.send(
                {"type": "error", "kind": type(exc).__name__, "message": message,
                 "exit": exc.exit_code}
            )  # fmt: skip
            return
        except Exception as exc:
            log.exception("a handed-over query crashed")
            message = f"internal error in the jpfs daemon ({type(exc).__name__}); see its log"
            conn.send({"type": "error", "kind": "internal", "message": message, "exit": 3})
            return
        conn.send(
            {"type": "result", "conversation": outcome.conversation,
             "state": outcome.state.value, "text": outcome.text, "usage": outcome.usage}
        )  # fmt: skip
