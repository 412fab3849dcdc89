"""Any executable as a model: the conversation goes in on stdin, the reply comes out on stdout.

Meant for CLIs such as ``llm -m MODEL`` or a local script. The command is run from an
argv list, never through a shell, so nothing in a prompt can be interpreted as shell
syntax. It never returns tool calls: the reply is plain text.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jpfs.errors import Cancelled, ProfileError, ProviderError
from jpfs.infra.providers.base import Reply, Request, Usage

# How often the waiting caller looks at the cancel flag and the deadline.
_POLL_SECONDS = 0.05
_READ_CHUNK = 65536
_WRITE_CHUNK = 65536
_STDERR_TAIL_LINES = 3
_STDERR_TAIL_CHARS = 300


class CommandProvider:
    """Run ``argv`` once per turn.

    The child gets the caller's environment, then ``env``, then ``JPFS_MODEL`` (the
    request's model). ``timeout`` (seconds) overrides the request's. The child leads a
    session of its own, so a cancel or a timeout kills it and everything it started.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> None:
        if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
            raise ProfileError(
                "command provider: 'command' must be a non-empty list of strings, "
                'e.g. ["llm", "-m", "gpt-4o"]'
            )
        self.argv = list(argv)
        self.env = dict(env or {})
        self.timeout = timeout
        self.cwd = cwd

    def complete(self, request: Request, cancel: threading.Event) -> Reply:
        if cancel.is_set():
            raise Cancelled("cancelled")
        timeout = self.timeout if self.timeout is not None else request.timeout
        prompt = render_prompt(request).encode()
        env = {**os.environ, **self.env, "JPFS_MODEL": request.model}
        name = self.argv[0]
        try:
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=self.cwd,
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            raise ProviderError(f"command not found: {name}") from exc
        except OSError as exc:
            raise ProviderError(f"cannot run command {name}: {exc.strerror or exc}") from exc

        deadline = time.monotonic() + timeout

        def check() -> None:
            if cancel.is_set():
                raise Cancelled("cancelled")
            if time.monotonic() >= deadline:
                raise ProviderError(f"command {name} timed out after {timeout:g} s")

        try:
            out, err = _exchange(proc, prompt, check)
            while True:
                try:
                    proc.wait(timeout=_POLL_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    check()
        except BaseException:
            _kill(proc)
            raise
        _close_pipes(proc)

        if proc.returncode != 0:
            raise ProviderError(f"command {name} {_exit_status(proc.returncode)}{_tail(err)}")
        return Reply(
            text=out.decode(errors="replace").rstrip(),
            usage=Usage(),
            model=request.model,
            stop_reason="end_turn",
        )


def _exchange(
    proc: subprocess.Popen[bytes], data: bytes, check: Callable[[], None]
) -> tuple[bytes, bytes]:
    """Feed ``data`` to stdin and collect stdout and stderr until both are closed, calling
    ``check`` at least every poll interval (it raises to stop).

    Not ``communicate(timeout=...)``: once that has timed out it never writes the rest
    of the input (CPython registers stdin only when called with input, and refuses input
    on a second call), so a long prompt would leave the child waiting forever.
    """
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    chunks: dict[int, list[bytes]] = {proc.stdout.fileno(): [], proc.stderr.fileno(): []}
    view = memoryview(data)
    sent = 0
    with selectors.DefaultSelector() as selector:
        if data:
            os.set_blocking(proc.stdin.fileno(), False)
            selector.register(proc.stdin, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        selector.register(proc.stdout, selectors.EVENT_READ)
        selector.register(proc.stderr, selectors.EVENT_READ)
        while selector.get_map():
            check()
            for key, _ in selector.select(_POLL_SECONDS):
                pipe = key.fileobj
                if pipe is proc.stdin:
                    try:
                        sent += os.write(key.fd, view[sent : sent + _WRITE_CHUNK])
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        sent = len(view)  # the child does not read its input; fine
                    if sent >= len(view):
                        selector.unregister(pipe)
                        proc.stdin.close()
                else:
                    chunk = os.read(key.fd, _READ_CHUNK)
                    if chunk:
                        chunks[key.fd].append(chunk)
                    else:
                        selector.unregister(pipe)
    return b"".join(chunks[proc.stdout.fileno()]), b"".join(chunks[proc.stderr.fileno()])


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill the child's whole process group and reap the child. Idempotent."""
    if proc.returncode is None:
        # Not yet reaped, so the group id cannot have been reused.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        pass  # unkillable (stuck in the kernel); nothing more we can do
    _close_pipes(proc)


def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
    # Closed here rather than drained: a grandchild that left the group may still hold
    # the other ends open.
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass


def _exit_status(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _tail(stderr: bytes) -> str:
    lines = [line.strip() for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    if not lines:
        return ""
    tail = " | ".join(lines[-_STDERR_TAIL_LINES:])
    if len(tail) > _STDERR_TAIL_CHARS:
        tail = "…" + tail[-(_STDERR_TAIL_CHARS - 1) :]
    return f": {tail}"


# --- rendering ------------------------------------------------------------------------


def render_prompt(request: Request) -> str:
    """The conversation as plain markdown: the system prompt, then one ``## role``
    section per message. Tool calls and results are rendered as text."""
    sections: list[str] = []
    if request.system.strip():
        sections.append(f"## system\n\n{request.system.strip()}")
    for message in request.messages:
        role = str(message.get("role", "user"))
        body = _render_content(message.get("content", ""))
        sections.append(f"## {role}\n\n{body}" if body else f"## {role}")
    return "\n\n".join(sections) + "\n"


def _render_content(content: Any) -> str:
    if isinstance(content, str):
        return content.strip()
    if not isinstance(content, list):
        return str(content)
    return "\n\n".join(part for part in (_render_block(b) for b in content) if part)


def _render_block(block: Any) -> str:
    if isinstance(block, str):
        return block.strip()
    if not isinstance(block, dict):
        return str(block)
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", "")).strip()
    if kind == "tool_use":
        args = json.dumps(block.get("input", {}), ensure_ascii=False, sort_keys=True)
        return f"[tool call {block.get('name', '?')} id={block.get('id', '?')}]\n{args}"
    if kind == "tool_result":
        label = "tool error" if block.get("is_error") else "tool result"
        body = _render_content(block.get("content", ""))
        return f"[{label} id={block.get('tool_use_id', '?')}]\n{body}".rstrip()
    return f"[{kind} block]"
