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

import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jpfs.errors import ProfileError, ToolError
from jpfs.tools.base import JsonDict, Tool, ToolContext

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}
_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN_RE = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}|[{}]")
_BASE_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM")
_TOOL_KEYS = {"name", "description", "program", "args", "env", "timeout", "max_output"}
_TOOL_KEYS |= {"parameters", "pass_env"}
_PARAM_KEYS = {"type", "description", "required", "enum", "pattern", "allow_leading_dash"}
DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_OUTPUT = 30_000


@dataclass(frozen=True)
class CommandParam:
    name: str
    type: str  # string | integer | number | boolean
    description: str = ""
    required: bool = True
    enum: tuple[Any, ...] | None = None
    pattern: str | None = None  # strings: must fullmatch
    # Strings starting with '-' are refused unless allowed: they would be read as options.
    allow_leading_dash: bool = False


ArgTemplate = str | tuple[str, ...]


@dataclass(frozen=True)
class CommandToolSpec:
    name: str
    description: str
    program: str
    args: tuple[ArgTemplate, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    parameters: tuple[CommandParam, ...] = ()
    timeout: float = DEFAULT_TIMEOUT
    max_output: int = DEFAULT_MAX_OUTPUT  # bytes of combined stdout+stderr kept
    pass_env: tuple[str, ...] = ()


def _placeholders(template: str) -> list[str]:
    return [m.group(1) for m in _TOKEN_RE.finditer(template) if m.group(1)]


def _render(template: str, values: Mapping[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        return values[m.group(1)] if m.group(1) else m.group(0)[0]

    return _TOKEN_RE.sub(sub, template)


class _Parser:
    """Validates one ``[[tools.command]]`` entry; errors name the tool and the key."""

    def __init__(self, index: int, entry: Mapping[str, Any]) -> None:
        self.entry = entry
        name = entry.get("name")
        self.where = f"tools.command[{index}]" + (f" ({name})" if isinstance(name, str) else "")

    def fail(self, key: str, problem: str) -> ProfileError:
        return ProfileError(f"{self.where}: {key!r} {problem}")

    def string(self, key: str, required: bool = True, default: str = "") -> str:
        value = self.entry.get(key, None if required else default)
        if not isinstance(value, str) or (required and not value.strip()):
            problem = (
                "is required and must be a non-empty string" if required else "must be a string"
            )
            raise self.fail(key, problem)
        return value

    def template(self, key: str, value: Any, params: Mapping[str, CommandParam]) -> str:
        if not isinstance(value, str):
            raise self.fail(key, "must contain only strings")
        for m in _TOKEN_RE.finditer(value):
            if m.group(0) in ("{", "}"):
                raise self.fail(key, f"has a stray brace in {value!r} (write {{{{ or }}}})")
            if m.group(1) and m.group(1) not in params:
                raise self.fail(key, f"uses undeclared parameter {{{m.group(1)}}}")
        return value

    def param(self, pname: str, raw: Any) -> CommandParam:
        key = f"parameters.{pname}"
        if not _IDENT_RE.fullmatch(pname):
            raise self.fail(key, "is not a valid parameter name (letters, digits, _)")
        if not isinstance(raw, Mapping):
            raise self.fail(key, "must be a table")
        unknown = sorted(set(raw) - _PARAM_KEYS)
        if unknown:
            raise self.fail(key, f"has unknown key(s): {', '.join(unknown)}")
        ptype = raw.get("type")
        if ptype not in _TYPES:
            raise self.fail(key + ".type", f"must be one of {', '.join(_TYPES)}")
        desc, required = raw.get("description", ""), raw.get("required", True)
        dash, pattern = raw.get("allow_leading_dash", False), raw.get("pattern")
        if not isinstance(desc, str):
            raise self.fail(key + ".description", "must be a string")
        if not isinstance(required, bool) or not isinstance(dash, bool):
            raise self.fail(key, "required / allow_leading_dash must be booleans")
        enum = raw.get("enum")
        if enum is not None:
            if not isinstance(enum, list) or not enum:
                raise self.fail(key + ".enum", "must be a non-empty list")
            if any(not _type_ok(ptype, v) for v in enum):
                raise self.fail(key + ".enum", f"values must all be of type {ptype}")
            enum = tuple(enum)
        if pattern is not None:
            if ptype != "string" or not isinstance(pattern, str):
                raise self.fail(key + ".pattern", "must be a string, on a string parameter")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise self.fail(key + ".pattern", f"is not a valid regex: {exc}") from exc
        return CommandParam(pname, ptype, desc, required, enum, pattern, dash)

    def parse(self) -> CommandToolSpec:
        unknown = sorted(set(self.entry) - _TOOL_KEYS)
        if unknown:
            raise self.fail(
                unknown[0], f"is not a known key (known: {', '.join(sorted(_TOOL_KEYS))})"
            )
        name = self.string("name")
        if not _NAME_RE.fullmatch(name):
            raise self.fail("name", "must be 1-64 letters, digits, '_' or '-'")
        raw_params = self.entry.get("parameters", {})
        if not isinstance(raw_params, Mapping):
            raise self.fail("parameters", "must be a table of parameter tables")
        params = {p: self.param(p, raw) for p, raw in raw_params.items()}
        raw_args = self.entry.get("args", [])
        if not isinstance(raw_args, list):
            raise self.fail("args", "must be a list of strings (or lists of strings)")
        args: list[ArgTemplate] = []
        for item in raw_args:
            if isinstance(item, list):
                args.append(tuple(self.template("args", v, params) for v in item))
            else:
                args.append(self.template("args", item, params))
        raw_env = self.entry.get("env", {})
        if not isinstance(raw_env, Mapping):
            raise self.fail("env", "must be a table of strings")
        env = []
        for var, value in raw_env.items():
            if not _IDENT_RE.fullmatch(var):
                raise self.fail(f"env.{var}", "is not a valid environment variable name")
            env.append((var, self.template(f"env.{var}", value, params)))
        used = {
            p for a in args for t in (a if isinstance(a, tuple) else (a,)) for p in _placeholders(t)
        }
        used |= {p for _, t in env for p in _placeholders(t)}
        for pname in params:
            if pname not in used:
                raise self.fail(f"parameters.{pname}", "is not used in args or env")
        timeout = self.entry.get("timeout", DEFAULT_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise self.fail("timeout", "must be a positive number of seconds")
        max_output = self.entry.get("max_output", DEFAULT_MAX_OUTPUT)
        if isinstance(max_output, bool) or not isinstance(max_output, int) or max_output < 100:
            raise self.fail("max_output", "must be an integer of at least 100 (bytes)")
        pass_env = self.entry.get("pass_env", [])
        if not isinstance(pass_env, list) or not all(
            isinstance(v, str) and _IDENT_RE.fullmatch(v) for v in pass_env
        ):
            raise self.fail("pass_env", "must be a list of environment variable names")
        return CommandToolSpec(
            name=name,
            description=self.string("description"),
            program=self.string("program"),
            args=tuple(args),
            env=tuple(env),
            parameters=tuple(params.values()),
            timeout=float(timeout),
            max_output=max_output,
            pass_env=tuple(pass_env),
        )


def _plain(obj: Any) -> Any:
    # tomlkit documents carry formatting wrappers; validate plain Python values.
    unwrap = getattr(obj, "unwrap", None)
    return unwrap() if callable(unwrap) else obj


def parse_command_tools(data: Mapping[str, Any]) -> list[CommandToolSpec]:
    """Command tool specs from a profile document, or from its ``tools`` table."""
    data = _plain(data)
    tools = data.get("tools", data)
    if not isinstance(tools, Mapping):
        raise ProfileError("'tools' must be a table")
    entries = tools.get("command", [])
    if not isinstance(entries, list):
        raise ProfileError("'tools.command' must be an array of tables ([[tools.command]])")
    specs: list[CommandToolSpec] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise ProfileError(f"tools.command[{i}] must be a table")
        spec = _Parser(i, entry).parse()
        if any(s.name == spec.name for s in specs):
            raise ProfileError(f"tools.command[{i}] ({spec.name}): duplicate tool name")
        specs.append(spec)
    return specs


def _type_ok(ptype: str, value: Any) -> bool:
    if isinstance(value, bool) and ptype != "boolean":
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return isinstance(value, _TYPES[ptype])


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
