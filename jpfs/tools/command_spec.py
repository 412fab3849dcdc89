r"""Parsing ``[[tools.command]]`` declarations of a profile into checked specs.

Unknown keys, unused parameters and malformed templates are :class:`ProfileError`\s
naming the tool and key: a command tool is part of an agent's security policy, so a
typo must fail loudly instead of silently widening or narrowing what runs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jpfs.errors import ProfileError

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
