"""The shape of a tool: a name, a precise JSON schema, and one implementation.

A tool's ``run`` receives a :class:`ToolContext` (who is calling, from where, with
what rights) and the model's arguments, already checked against the schema's
required keys. It returns text for the model, or raises :class:`~jpfs.errors.JpfsError`
(``ToolError``, ``ScopeError``...), which the runtime returns to the model as a tool
error with a one-line reason. Any other exception is a bug.
"""

from __future__ import annotations

import functools
import logging
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from jpfs.errors import Cancelled, JpfsError, ToolError, ToolFailure

if TYPE_CHECKING:
    from jpfs.core.agentconfig import AgentConfig
    from jpfs.core.workspace import Workspace
    from jpfs.infra.providers.base import ToolSpec

JsonDict = dict[str, Any]
log = logging.getLogger("jpfs.services.run.runtime")  # where tool crashes were always logged


class SubRunner(Protocol):
    """The run calling a tool, which runs the sub-agents it starts (a
    ``jpfs.services.run.runtime.Runner``; named by its shape so that the core does
    not import the run loop above it)."""

    ws: Workspace
    cancel: threading.Event


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
    workspace: Workspace | None = None
    # The caller's profile: its [config] snapshot (tools.allow, tools.agents, name...).
    config: Mapping[str, Any] = field(default_factory=dict)
    runner: SubRunner | None = None
    # The model's id of this call: a child it started is found again after a crash.
    call_id: str = ""
    # Given each sub-agent's whole outcome (an adapter that reports its usage).
    on_outcome: Callable[[Any], None] | None = None

    @functools.cached_property
    def settings(self) -> AgentConfig:
        """:attr:`config`, typed."""
        from jpfs.core import agentconfig

        return agentconfig.view(self.config)

    def ws(self) -> Workspace:
        if self.workspace is None:
            raise ToolError("this tool needs a workspace and was called without one")
        return self.workspace


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: JsonDict
    run: Callable[[ToolContext, JsonDict], str]

    def spec(self) -> ToolSpec:
        from jpfs.infra.providers.base import ToolSpec

        return ToolSpec(self.name, self.description, self.input_schema)


def check_arguments(tool: Tool, arguments: Mapping[str, Any]) -> JsonDict:
    """Validate ``arguments`` against the tool's JSON schema, once, in the core.

    Every adapter (the runtime for agents, the MCP server, the CLI's tool calls) goes
    through here, so a bad input gets the same one-line error everywhere: types,
    required keys, unknown keys, enums, minimums, empty strings where an id belongs.
    ``null`` values count as absent.
    """
    given = {k: v for k, v in arguments.items() if v is not None}
    errors = sorted(_validator(tool).iter_errors(given), key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        where = "/".join(str(p) for p in error.absolute_path)
        subject = f"argument {where!r} " if where else ""
        raise ToolError(f"{tool.name}: {subject}{_message(error)}")
    return given


_VALIDATORS: dict[str, Any] = {}


def _validator(tool: Tool) -> Any:
    import json

    import jsonschema

    key = json.dumps(tool.input_schema, sort_keys=True, default=str)
    found = _VALIDATORS.get(key)
    if found is None:
        found = _VALIDATORS[key] = jsonschema.Draft202012Validator(tool.input_schema)
    return found


def _message(error: Any) -> str:
    kind, value = error.validator, error.validator_value
    if kind == "required":
        missing = [k for k in value if k not in error.instance]
        return f"missing required argument(s): {', '.join(missing)}"
    if kind == "additionalProperties":
        unknown = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        return f"unknown argument(s): {', '.join(unknown)}"
    if kind == "type":
        return f"must be of type {value if isinstance(value, str) else ' or '.join(value)}"
    if kind == "enum":
        return f"must be one of {', '.join(map(str, value))}"
    if kind == "minLength" and value == 1:
        return "must not be empty"
    if kind == "minimum":
        return f"must be at least {value}"
    if kind == "exclusiveMinimum":
        return f"must be greater than {value}"
    if kind == "maximum":
        return f"must be at most {value}"
    return str(error.message)


# The tools a conversation's profile grants: (its configuration, the agents dir) -> name
# -> tool. The tools sit above the run loop (jp_query runs sub-agents through it), so
# the run loop is handed them (jpfs.services.run.app.App.toolbox) instead of importing them.
Toolbox = Callable[[Mapping[str, Any], Path], dict[str, Tool]]


def call_tool(
    tools: Mapping[str, Tool], ctx: ToolContext, call: Mapping[str, Any]
) -> tuple[str, bool]:
    """Run one tool call: its result text, and whether it is an error. Every failure is
    a result the model can read (a refused call, a failed sub-agent, a bug: logged);
    only a cancellation propagates."""
    tool = tools.get(str(call["name"]))
    if tool is None:
        return f"unknown tool {call['name']!r}: this agent has no such tool", True
    try:
        args = check_arguments(tool, call.get("input") or {})
        return tool.run(ctx, args), False
    except Cancelled:
        raise
    except ToolFailure as exc:
        return exc.result, True
    except JpfsError as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__, True
    except Exception:
        log.error("tool %s crashed:\n%s", call["name"], traceback.format_exc())
        return f"internal error in tool {call['name']} (logged)", True
