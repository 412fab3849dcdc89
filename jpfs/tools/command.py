"""Local command tools declared in an agent profile (``[[tools.command]]``).

A command is a fixed program plus argv/environment templates; the model only fills in
declared, validated parameters. Every template element becomes exactly one argv item
(``{param}`` is substituted inside it, never split, never seen by a shell), so shell
metacharacters in a value are inert. An ``args`` element may also be a list of elements,
a group kept or dropped together (``["-k", "{filter}"]``); any element or group that
mentions an omitted optional parameter is dropped, and so is such an ``env`` entry.

The child runs in ``ctx.files_root`` in its own session so timeout, cancellation and
stray background children are handled by killing the whole process group. Its
environment is a small allowlist of the daemon's (PATH, HOME, locale...) plus the
profile's ``pass_env`` names and ``env`` table: API keys in the daemon's environment
must not reach code an agent may have written.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jpfs.core.tool import JsonDict, Tool, ToolContext
from jpfs.errors import ToolError
from jpfs.tools.command_spec import (
    _BASE_ENV,
    CommandParam,
    CommandToolSpec,
    _placeholders,
    _render,
    _type_ok,
    parse_command_tools,
)

__all__ = ["CommandParam", "CommandToolSpec", "make_command_tool", "parse_command_tools"]


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _values(spec: CommandToolSpec, args: Mapping[str, Any]) -> dict[str, str | None]:
    unknown = sorted(set(args) - {p.name for p in spec.parameters})
    if unknown:
        raise ToolError(f"{spec.name}: unknown argument(s): {', '.join(unknown)}")
    values: dict[str, str | None] = {}
    for p in spec.parameters:
        value = args.get(p.name)
        if value is None:
            if p.required:
                raise ToolError(f"{spec.name}: missing required argument {p.name!r}")
            values[p.name] = None
            continue
        if not _type_ok(p.type, value):
            raise ToolError(f"{spec.name}: argument {p.name!r} must be of type {p.type}")
        if p.enum is not None and value not in p.enum:
            choices = ", ".join(_format(v) for v in p.enum)
            raise ToolError(f"{spec.name}: argument {p.name!r} must be one of: {choices}")
        text = _format(value)
        if "\0" in text:
            raise ToolError(f"{spec.name}: argument {p.name!r} contains a NUL byte")
        if p.type == "string" and text.startswith("-") and not p.allow_leading_dash:
            raise ToolError(f"{spec.name}: argument {p.name!r} may not start with '-'")
        if p.pattern is not None and not re.fullmatch(p.pattern, text):
            raise ToolError(f"{spec.name}: argument {p.name!r} must match {p.pattern!r}")
        values[p.name] = text
    return values


def _present(template: str, values: Mapping[str, str | None]) -> bool:
    return all(values[p] is not None for p in _placeholders(template))


def build_command(
    spec: CommandToolSpec, args: Mapping[str, Any], files_root: Path
) -> tuple[list[str], dict[str, str]]:
    """Validated argv (program resolved) and environment for one call."""
    values = _values(spec, args)
    given = {k: v for k, v in values.items() if v is not None}
    env = {k: v for k, v in os.environ.items() if k in _BASE_ENV or k.startswith("LC_")}
    env.update({k: os.environ[k] for k in spec.pass_env if k in os.environ})
    for var, template in spec.env:
        if _present(template, values):
            env[var] = _render(template, given)
        else:
            env.pop(var, None)
    argv: list[str] = []
    for item in spec.args:
        group = item if isinstance(item, tuple) else (item,)
        if all(_present(t, values) for t in group):
            argv.extend(_render(t, given) for t in group)
    program = spec.program
    if "/" in program:
        path = Path(program) if Path(program).is_absolute() else files_root / program
        resolved = str(path) if path.is_file() and os.access(path, os.X_OK) else None
    else:
        resolved = shutil.which(program, path=env.get("PATH", os.defpath))
    if resolved is None:
        raise ToolError(f"{spec.name}: program {program!r} not found or not executable")
    return [resolved, *argv], env


class _Capture:
    """Keeps the first and last ``limit / 2`` bytes of a stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.half = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > self.half:
            del self.tail[: len(self.tail) - self.half]

    def text(self) -> str:
        omitted = self.total - len(self.head) - len(self.tail)
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if omitted <= 0:
            return head + tail
        note = f"\n[truncated: {omitted:,} of {self.total:,} bytes of output omitted here]\n"
        return head + note + tail


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    # Peek without reaping: the pid (and so the process group id) must stay ours until
    # the group has been killed, or killpg could hit a recycled pid.
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_command(spec: CommandToolSpec, ctx: ToolContext, args: Mapping[str, Any]) -> str:
    argv, env = build_command(spec, args, ctx.files_root)
    if ctx.cancel.is_set():
        raise ToolError("cancelled")
    # One line for the model, however odd the values.
    shown = shlex.join([spec.program, *argv[1:]]).replace("\n", "\\n").replace("\r", "\\r")
    if len(shown) > 500:
        shown = shown[:500] + "..."
    try:
        proc = subprocess.Popen(
            argv,
            cwd=ctx.files_root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        raise ToolError(f"{spec.name}: cannot start {spec.program!r}: {exc.strerror}") from exc
    stream = proc.stdout
    assert stream is not None
    capture = _Capture(spec.max_output)

    def pump() -> None:
        # The reader owns the pipe: closing it elsewhere while a read is blocked could
        # let the fd number be reused under it.
        try:
            while chunk := os.read(stream.fileno(), 65536):
                capture.feed(chunk)
        finally:
            stream.close()

    reader = threading.Thread(target=pump, name=f"jpfs-cmd-{spec.name}", daemon=True)
    reader.start()
    deadline = time.monotonic() + spec.timeout
    timed_out = cancelled = False
    pause = 0.005
    try:
        while not _exited(proc):
            if ctx.cancel.is_set():
                cancelled = True
                break
            if time.monotonic() >= deadline:
                timed_out = True
                break
            # Waiting on the event, not sleeping: a cancel wakes us at once.
            ctx.cancel.wait(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 0.05)
    finally:
        # Also reaps stragglers a finished command left in its group.
        _kill_group(proc)
        proc.wait()
        reader.join(timeout=1.0)
    if cancelled:
        raise ToolError("cancelled")
    if timed_out:
        status = f"timed out after {spec.timeout:g} s; the command and its children were killed"
    elif proc.returncode < 0:
        try:
            status = f"killed by signal {signal.Signals(-proc.returncode).name}"
        except ValueError:
            status = f"killed by signal {-proc.returncode}"
    else:
        status = f"exit status {proc.returncode}"
    output = capture.text()
    if reader.is_alive():
        output += "\n[output may be incomplete: a detached process kept the pipe open]"
    return f"$ {shown}\n{status}\n{output if output else '[no output]'}"


def _schema(spec: CommandToolSpec) -> JsonDict:
    props: dict[str, JsonDict] = {}
    for p in spec.parameters:
        prop: JsonDict = {"type": p.type}
        if p.description:
            prop["description"] = p.description
        if p.enum is not None:
            prop["enum"] = list(p.enum)
        if p.pattern is not None:
            prop["pattern"] = p.pattern
        props[p.name] = prop
    return {
        "type": "object",
        "properties": props,
        "required": [p.name for p in spec.parameters if p.required],
        "additionalProperties": False,
    }


def make_command_tool(spec: CommandToolSpec) -> Tool:
    # Unquoted on purpose: the model should see the placeholders as declared.
    template = " ".join(
        [spec.program, *(t for a in spec.args for t in (a if isinstance(a, tuple) else (a,)))]
    )
    description = (
        f"{spec.description.rstrip()}\n\nRuns `{template}` in the working tree (no shell; "
        f"each value is passed as one literal argument). Times out after {spec.timeout:g} s; "
        f"output beyond {spec.max_output:,} bytes is cut in the middle. Reports the exit status."
    )

    def run(ctx: ToolContext, args: JsonDict) -> str:
        return run_command(spec, ctx, args)

    return Tool(spec.name, description, _schema(spec), run)
