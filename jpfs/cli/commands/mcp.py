"""``jpfs mcp`` (an MCP server over stdio) and ``jpfs tools`` (the same tools as JSON)."""

from __future__ import annotations

import json
import logging
from typing import Annotated

import typer

from jpfs.cli.context import note, out, out_json, state
from jpfs.cli.options import Format, RootId, root_scope
from jpfs.tools.registry import build_tools

Agents = Annotated[
    list[str] | None,
    typer.Option(
        "--agent",
        metavar="NAME",
        help="A profile the client may start (repeatable; default: config agents.allowed).",
    ),
]
Tools = Annotated[
    list[str] | None,
    typer.Option(
        "--tool",
        metavar="NAME",
        help="Export only these tools (repeatable; default: all exported).",
    ),
]


def mcp(root_id: RootId = None, agent: Agents = None, tool: Tools = None) -> None:
    """Serve jpfs sub-agent tools to an MCP client over stdio.

    The client acts as one conversation: --root-id, or a new top-level conversation
    created on its first tool call (its id is printed on stderr). Every id the client
    names must be a descendant of it.
    """
    from jpfs.mcp.caller import allowed_agents, session

    ws = state.ws()
    root = root_scope(ws, root_id)
    caller = session(
        ws,
        allowed_agents(ws, agent or []),
        tool or [],
        root,
        announce=lambda r: note(f"jpfs mcp: conversation {r}"),
    )
    logging.basicConfig(level=logging.WARNING, format="jpfs mcp: %(levelname)s %(message)s")
    note(
        f"jpfs mcp: serving {len(caller.tools)} tools on stdio for "
        + (f"conversation {root}" if root else "a new conversation (created on first use)")
    )
    from jpfs.mcp.server import serve

    serve(caller)


def tools(
    agent: Agents = None,
    tool: Tools = None,
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile", metavar="NAME", help="Show the tools this agent profile gets instead."
        ),
    ] = None,
    fmt: Format = "text",
) -> None:
    """Print the tools `jpfs mcp` exports (name, description, JSON input schema)."""
    from jpfs.core import profiles
    from jpfs.mcp.caller import allowed_agents, definitions, export

    ws = state.ws()
    if profile is not None:
        found = build_tools(profiles.load(ws.agents_dir, profile).config, ws.agents_dir)
    else:
        found = export(ws, allowed_agents(ws, agent or []), tool or [])[1]
    defs = definitions(found)
    if fmt == "json":
        out_json(defs)
        return
    for d in defs:
        out(f"{d['name']}\n    {d['description'].replace(chr(10), chr(10) + '    ')}")
        out(f"    input: {json.dumps(d['input_schema'], ensure_ascii=False)}\n")
