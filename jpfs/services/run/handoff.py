"""``jpfs query`` handed to a running daemon: the request, the wire format, the client.

A ``jpfs query`` process that ran the agent itself would import the model's SDK (about
a second for anthropic) on every call; the daemon has it loaded. So the CLI first asks
the daemon, over a Unix socket, to run exactly what it would have run, and shows what
comes back; with no daemon it runs in process (:func:`jpfs.services.run.query.run_request`).

The socket is ``.jpfs/local/query.sock`` (mode 0600; the daemon also checks the peer's
uid). A path longer than ``sun_path`` allows (108 bytes) is reached through the
directory's descriptor, ``/proc/self/fd/N/query.sock``: same file, short name.

Protocol: one request per connection. The client sends one line of JSON (:class:`QueryRequest`
plus ``v``, ``cfg`` and ``env``); the daemon answers with JSON lines:

    {"type": "declined", "reason": ...}        not served here: run in process
    {"type": "start", "conversation": ID}      the daemon took the request
    {"type": "note", "text": ...}              progress (stderr)
    {"type": "turn"} / {"type": "text", "text": ...}   the answer as it streams
    {"type": "result", "conversation", "state", "text", "usage"}   last line: the outcome
    {"type": "error", "kind": ..., "message": ..., "exit": N}   last line: an error

The daemon serves a request only when it would run it as this process would: the
same ``--cfg`` layers and the same environment where it matters (:data:`ENV_PREFIXES`,
compared by a digest, so no key crosses the socket); else it declines. The client
closing the connection (Ctrl-C) cancels the run. A connection that ends before
"start" was never acted on, so the client falls back to running in process.

This module is the client's whole import (no SDK, no git, no daemon code).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from jpfs.core.state import State
from jpfs.errors import JpfsError

SOCKET = "query.sock"
VERSION = 1
MAX_LINE = 1 << 20  # a request line: a long query, never unbounded
# Environment variables that change what a run does: config layers, the provider's key
# and endpoint, commit identities, where trust and git config are read, programs found.
ENV_PREFIXES = ("JPFS_", "ANTHROPIC_", "OPENAI_", "GIT_")
ENV_NAMES = ("HOME", "XDG_CONFIG_HOME", "PATH")
_SUN_PATH_MAX = 107  # bytes, without the trailing NUL


@dataclass(frozen=True)
class QueryRequest:
    """What one ``jpfs query`` run asks for, as the CLI parsed it. The daemon's check of
    a request on the socket is made from these fields (``queryserver.SCHEMA``): their
    types, and the JSON schema a field's ``metadata["schema"]`` adds."""

    text: str
    conv_id: str | None = None
    new: bool = False
    agent: str | None = None
    root_id: str | None = None
    hidden: bool = False
    tmp: str | None = None
    activate: bool = True
    # False: --no-onboard; None: as the profile says (no flag turns onboarding on).
    onboard: bool | None = field(default=None, metadata={"schema": {"enum": [False, None]}})
    # A new conversation's budget (jpfs.services.conversations.budgets).
    budget_tokens: int | None = field(default=None, metadata={"schema": {"minimum": 1}})
    budget_usd: float | None = field(default=None, metadata={"schema": {"exclusiveMinimum": 0}})

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Outcome:
    conversation: str
    state: State
    text: str
    # What the run spent, its sub-agents' included (jpfs.core.usage.Spend.to_json);
    # None when not measured (an outcome read back from the files).
    usage: dict[str, Any] | None = None

    def wrapped(self) -> str:
        """The tool result a calling agent sees: only the final answer, or the questions."""
        cid = escape(self.conversation, quote=True)
        if self.state is State.WAITING:
            return f'<questions conversation_id="{cid}">\n{self.text.strip()}\n</questions>'
        if self.state in (State.FAILED, State.KILLED):
            return f'<error conversation_id="{cid}">\n{self.text.strip()}\n</error>'
        return f'<response conversation_id="{cid}">\n{self.text.strip()}\n</response>'


def env_digest(environ: Mapping[str, str]) -> str:
    items = sorted(
        (k, v) for k, v in environ.items() if k.startswith(ENV_PREFIXES) or k in ENV_NAMES
    )
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()


@contextlib.contextmanager
def socket_address(local_dir: Path) -> Iterator[str]:
    """An address for ``local_dir/query.sock`` that fits ``sun_path``."""
    path = str(local_dir / SOCKET)
    if len(os.fsencode(path)) <= _SUN_PATH_MAX:
        yield path
        return
    fd = os.open(local_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{SOCKET}"
    finally:
        os.close(fd)


def encode(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False).encode() + b"\n"


class Gone(Exception):
    """The daemon closed the connection before it took the request."""


def _lines(sock: socket.socket) -> Iterator[dict[str, Any]]:
    buf = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            if buf.strip():
                raise JpfsError("the daemon's answer was cut off (see `jpfs daemon status`)")
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            message = json.loads(line)
            if not isinstance(message, dict):
                raise JpfsError("the daemon answered with something that is not a message")
            yield message


def _error(message: Mapping[str, Any]) -> JpfsError:
    exc = JpfsError(str(message.get("message") or "the daemon's run failed"))
    code = message.get("exit")
    exc.exit_code = code if isinstance(code, int) else 1
    return exc


def hand_over(
    local_dir: Path,
    request: QueryRequest,
    cfg: Sequence[str],
    *,
    on_text: Callable[[str | None], None] | None = None,
    on_note: Callable[[str, str], None] | None = None,
) -> Outcome | None:
    """Have the workspace's daemon run ``request``; None when no daemon takes it (none
    runs, a stale socket, or it declined): then the caller runs it in process.

    ``on_note(conversation, text)`` gets the run's progress notes."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        try:
            with socket_address(local_dir) as address:
                sock.connect(address)
        except OSError:
            return None  # no daemon (refused: a stale socket; missing: never started)
        message = {
            "v": VERSION,
            **request.to_json(),
            "stream": on_text is not None,
            "cfg": list(cfg),
            "env": env_digest(os.environ),
        }
        try:
            sock.sendall(encode(message))
        except OSError:
            return None  # it went away before reading anything
        return _receive(sock, on_text, on_note)
    finally:
        sock.close()


def _receive(
    sock: socket.socket,
    on_text: Callable[[str | None], None] | None,
    on_note: Callable[[str, str], None] | None,
) -> Outcome | None:
    conversation = ""
    try:
        for message in _lines(sock):
            kind = message.get("type")
            if kind == "declined":
                return None
            if kind == "start":
                conversation = str(message.get("conversation", ""))
            elif kind == "note" and on_note is not None:
                on_note(conversation, str(message.get("text", "")))
            elif kind == "turn" and on_text is not None:
                on_text(None)
            elif kind == "text" and on_text is not None:
                on_text(str(message.get("text", "")))
            elif kind == "result":
                usage = message.get("usage")
                return Outcome(
                    str(message["conversation"]),
                    State(message["state"]),
                    str(message["text"]),
                    usage if isinstance(usage, dict) else None,
                )
            elif kind == "error":
                raise _error(message)
    except (ConnectionResetError, BrokenPipeError):
        pass
    except (json.JSONDecodeError, KeyError, ValueError) as exc:
        raise JpfsError(f"the daemon's answer is malformed: {exc}") from None
    if not conversation:
        return None  # closed before it took the request: nothing was done
    raise JpfsError(
        f"the daemon stopped during the run of {conversation} (see `jpfs daemon status`)"
    )


def hand_or_run(
    local_dir: Path,
    request: QueryRequest,
    cfg: Sequence[str],
    here: Callable[[], Outcome],
    *,
    on_text: Callable[[str | None], None] | None = None,
    on_note: Callable[[str, str], None] | None = None,
) -> Outcome:
    """The one policy for a query: the workspace's daemon runs it when one takes it
    (it has the model's SDK loaded; the caller then imports none of it), else
    ``here()`` does (``jpfs.services.run.query.run_request`` with the caller's runners)."""
    handed = hand_over(local_dir, request, cfg, on_text=on_text, on_note=on_note)
    return handed if handed is not None else here()
