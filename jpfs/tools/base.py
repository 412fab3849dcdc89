"""The shape of a tool: a name, a precise JSON schema, and one implementation.

A tool's ``run`` receives a :class:`ToolContext` (who is calling, from where, with
what rights) and the model's arguments, already checked against the schema's
required keys. It returns text for the model, or raises :class:`~jpfs.errors.JpfsError`
(``ToolError``, ``ScopeError``...), which the runtime returns to the model as a tool
error with a one-line reason. Any other exception is a bug.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jpfs.errors import ToolError

if TYPE_CHECKING:
    from jpfs.providers.base import ToolSpec

JsonDict = dict[str, Any]


@dataclass
class ToolContext:
    """Everything a tool may know about its caller; scope checks read it, never the model."""

    # Workspace root (the main work tree); conversation ids resolve under its root.
    workspace_root: Path
    # The calling conversation's id ("" for a top-level human/MCP caller acting on the root).
    conversation: str
    # Where file tools read and write: the workspace root, or the agent's worktree.
    files_root: Path
    # Write permission for fs_write_file / fs_modify_file: glob patterns relative to
    # files_root; empty means read-only.
    writable: Sequence[str] = ()
    cancel: threading.Event = field(default_factory=threading.Event)
    # Runtime services (the agent runner, the profile, ...) attached by the runtime;
    # tools that need them look them up by key.
    services: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: JsonDict
    run: Callable[[ToolContext, JsonDict], str]

    def spec(self) -> ToolSpec:
        from jpfs.providers.base import ToolSpec

        return ToolSpec(self.name, self.description, self.input_schema)


_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "array": list,
    "object": dict,
}


def check_arguments(tool: Tool, arguments: Mapping[str, Any]) -> JsonDict:
    """Cheap structural check before a tool runs: required keys, no unknown keys, basic types.

    Full JSON-schema validation would need a dependency; the tools validate meaning
    (paths, ids, scope) themselves, which is where the security lives anyway.
    """
    schema = tool.input_schema
    props: Mapping[str, Any] = schema.get("properties", {})
    missing = [k for k in schema.get("required", []) if arguments.get(k) is None]
    if missing:
        raise ToolError(f"{tool.name}: missing required argument(s): {', '.join(missing)}")
    if schema.get("additionalProperties") is False:
        unknown = sorted(set(arguments) - set(props))
        if unknown:
            raise ToolError(f"{tool.name}: unknown argument(s): {', '.join(unknown)}")
    for key, value in arguments.items():
        prop = props.get(key)
        if not prop or value is None:
            continue
        expected = prop.get("type")
        if isinstance(expected, str) and expected in _TYPES:
            # bool is an int subclass in Python but not a number in JSON schema.
            ok = isinstance(value, _TYPES[expected]) and (
                expected == "boolean" or not isinstance(value, bool)
            )
            if not ok:
                raise ToolError(f"{tool.name}: argument {key!r} must be of type {expected}")
        enum = prop.get("enum")
        if enum is not None and value not in enum:
            choices = ", ".join(map(str, enum))
            raise ToolError(f"{tool.name}: argument {key!r} must be one of {choices}")
    return {k: v for k, v in arguments.items() if v is not None}
