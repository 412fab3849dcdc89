"""An outside agent (an MCP client) as a jpfs caller: one conversation R and its tools.

Everything the MCP client does happens as conversation R, the ``--root-id`` or a new
top-level ``mcp-…`` conversation created on the first tool call (a client that only
lists tools leaves no trace). The tools are the registry's own (one source for the
schemas and descriptions the agents see), run with a synthetic caller profile whose
``tools.agents`` is the allowed profiles and ``tools.allow`` the exported tools; the
tools check every id against R's subtree themselves (:func:`jpfs.core.scope.resolve`).

Calls run in this process, never handed to a daemon as ``jpfs query`` hands its runs
(:mod:`jpfs.services.run.handoff`): the hand-off spares a short-lived process the SDK's
import, which a server that lives as long as its client pays once, and a tool call is
not a query: it runs as R (its limits, profiles, scope), with progress, cancellation
and usage tied to the MCP request, none of which a handed-over query carries
(protocol/mcp.md, "Calls and results").

Nothing here imports the ``mcp`` SDK: ``jpfs tools`` uses this module too.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jpfs.core import agentconfig, ids, locks, profiles, record, scope, tree
from jpfs.core.agentconfig import AgentConfig
from jpfs.core.conversation import Conversation
from jpfs.core.state import AGENT_ACTS
from jpfs.core.tool import Tool, ToolContext
from jpfs.core.workspace import Workspace
from jpfs.errors import Cancelled, ConfigError, JpfsError, LockError
from jpfs.services.conversations import creation, lifecycle
from jpfs.services.run.app import App
from jpfs.services.run.control import find_child_for_call
from jpfs.services.run.handoff import Outcome
from jpfs.services.run.runtime import Progress, Runner
from jpfs.tools.registry import build_tools, catalog

log = logging.getLogger("jpfs.mcp")

# The tools an outside caller may get, in the order clients list them; those the
# registry does not (yet) build are left out. Agent-internal tools (file and command
# tools, ask_caller) are not here: MCP clients have their own.
EXPORTED: tuple[str, ...] = (
    "jp_query",
    "jp_conversation_list",
    "jp_conversation_print",
    "jp_conversation_grep",
    "jp_blame",
    "jp_await",
    "mail_send",
    "mail_check",
    "mail_read",
    "mail_delete",
    "mail_filter",
    "fork",
    "kill",
    "merge",
)

# Generous for one interactive client, but finite: a runaway client loop stops here.
MAX_CHILDREN = 256
PROFILE_NAME = "mcp"


def allowed_agents(ws: Workspace, names: Sequence[str] = ()) -> list[str]:
    """The profiles the client may start: ``names`` (checked) or the workspace's list."""
    if not names:
        return list(ws.config.agents_allowed)
    for name in names:
        profiles.load(ws.agents_dir, name)  # a typo fails at startup, not on first use
    return list(dict.fromkeys(names))


def caller_config(agents: Sequence[str], allow: Sequence[str], root: str | None) -> dict[str, Any]:
    """The synthetic profile R runs under; stored in R's conversation.toml when created."""
    return {
        "name": PROFILE_NAME,
        "description": "An MCP client acting through `jpfs mcp`.",
        "tools": {"allow": list(allow), "agents": list(agents), "write": [], "command": []},
        # The client itself only creates direct children of R; deeper levels are
        # bounded by each sub-agent's own profile.
        "limits": {"max_children": MAX_CHILDREN, "max_depth": (ids.depth(root) if root else 1) + 1},
    }


def export(
    ws: Workspace, agents: Sequence[str], only: Sequence[str] = (), root: str | None = None
) -> tuple[dict[str, Any], dict[str, Tool]]:
    """The caller config and the tools it gets (``only``: a subset of the exported ones)."""
    everything = catalog(caller_config(agents, [], root), ws.agents_dir)
    available = [name for name in EXPORTED if name in everything]
    unknown = [name for name in only if name not in available]
    if unknown:
        raise ConfigError(
            f"not an exported tool: {', '.join(unknown)} (choose from {', '.join(available)})"
        )
    allow = [name for name in available if not only or name in only]
    config = caller_config(agents, allow, root)
    return config, build_tools(config, ws.agents_dir)


def session(
    ws: Workspace,
    agents: Sequence[str],
    only: Sequence[str] = (),
    root: str | None = None,
    announce: Callable[[str], None] | None = None,
) -> Caller:
    """The MCP adapter's composition root: its App (the registry's tools run its
    sub-agents) and the caller R, which builds every request's runner from it."""
    config, tools = export(ws, agents, only, root)
    return Caller(ws, config, tools, App(build_tools), root, announce=announce)


def definitions(tools: Mapping[str, Tool]) -> list[dict[str, Any]]:
    """Plain JSON tool definitions: what ``jpfs tools --format json`` prints."""
    return [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for t in tools.values()
    ]


@dataclass(frozen=True)
class Result:
    text: str
    is_error: bool
    # A jp_query's run: what it spent, its sub-agents' included (jpfs.core.usage).
    usage: dict[str, Any] | None = None


@dataclass
class Caller:
    """Conversation R and its tools; thread-safe, one instance serves every request."""

    ws: Workspace
    config: dict[str, Any]
    tools: dict[str, Tool]
    app: App
    root: str | None = None
    title: str = "MCP session"
    # Told the id of a root created on demand (``jpfs mcp`` prints it to stderr).
    announce: Callable[[str], None] | None = None
    _root_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def settings(self) -> AgentConfig:
        """:attr:`config`, typed."""
        return agentconfig.view(self.config)

    def conversation(self) -> str:
        with self._root_lock:
            if self.root is None:
                # The server's own profile, made here: no user's allow-list to check.
                conv = lifecycle.new_conversation(
                    self.ws,
                    ids.generate(PROFILE_NAME),
                    agent=PROFILE_NAME,
                    title=self.title,
                    config=self.config,
                    actor=creation.agent_actor(),
                )
                self.root = conv.id
                if self.announce is not None:
                    self.announce(conv.id)
            return self.root

    def call(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        cancel: threading.Event,
        progress: Progress | None = None,
    ) -> Result:
        """Run one tool call to the end (blocking); a set ``cancel`` stops it."""
        # Each call has its own runner: cancelling one request stops only its runs.
        runner = Runner(
            self.ws,
            app=self.app,
            cancel=cancel,
            progress=progress,
            lock_wait=self.ws.config.query_lock_wait,
        )
        call_id = f"mcp-{uuid.uuid4().hex}"
        outcomes: list[Outcome] = []
        try:
            root = self.conversation()
            ctx = ToolContext(
                workspace_root=self.ws.root,
                conversation=root,
                files_root=self.ws.root,
                cancel=cancel,
                workspace=self.ws,
                config=self.config,
                runner=runner,
                call_id=call_id,
                on_outcome=outcomes.append,
            )
            text, is_error = runner.call_tool(self.tools, ctx, {"name": name, "input": arguments})
        except Cancelled:
            if name == "jp_query":
                try:
                    self.kill_interrupted(str(arguments.get("id") or "new"), call_id)
                except JpfsError as exc:
                    log.warning("cancelled %s: could not mark its runs killed: %s", name, exc)
            return Result(f"{name} cancelled", True)
        except JpfsError as exc:  # creating R failed
            return Result(str(exc).splitlines()[0], True)
        return Result(text, is_error, outcomes[-1].usage if outcomes else None)

    def kill_interrupted(self, target: str, call_id: str) -> None:
        """Mark the runs a cancelled ``jp_query`` left mid-way as killed.

        Left as they are, a daemon would resume them behind the caller's back; the
        caller cancelled, so nothing of that run may go on. Runs that already
        reached a resting state (questions, idle) are left alone.
        """
        root = self.conversation()
        conv_root = self.ws.conv_root
        if target == "new":
            started = find_child_for_call(conv_root, root, call_id)
        else:
            try:
                started = scope.resolve(conv_root, target, within=root)
            except JpfsError:
                return
        if started is None:
            return
        for conv_id in [started, *tree.walk(conv_root, started)]:
            conv = Conversation(conv_root, conv_id)
            if tree.state_of(conv) not in AGENT_ACTS:
                continue
            try:
                with locks.conversation_lock(self.ws.local_dir, conv_id, wait=1.0):
                    if tree.state_of(conv) in AGENT_ACTS:
                        conv.update(status="killed")
                        record.commit(
                            self.ws,
                            conv_id,
                            "kill",
                            agent=conv.meta().get("agent"),
                            note="MCP request cancelled",
                        )
            except LockError:
                log.warning("not killing %s: another run holds it", conv_id)
