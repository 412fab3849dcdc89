"""Sub-agent tools: ``jp_query`` and ``jp_conversation_list|print|grep``.

Every id a model passes is checked by :func:`jpfs.core.scope.resolve` against the calling
conversation's subtree: only strict descendants can be named. The profiles a caller
may start are its profile's ``tools.agents``; the schema's enum says so, and the
implementation checks again (a schema is advice to the model, not a boundary).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jpfs.core import agentconfig, profiles, record, scope, transcript, tree
from jpfs.core.agentconfig import AgentConfig
from jpfs.core.conversation import Conversation
from jpfs.core.state import State
from jpfs.core.tool import JsonDict, Tool, ToolContext
from jpfs.errors import LimitError, ProfileError, ToolError, ToolFailure
from jpfs.services.conversations import creation
from jpfs.services.run import control
from jpfs.services.run.runtime import Runner
from jpfs.services.views import search

if TYPE_CHECKING:
    from jpfs.services.run.query import Outcome


def runner_of(ctx: ToolContext) -> Runner | None:
    """The run calling the tool, as the services take it (None when no run calls it:
    the service builds a runner of its own, on an App without tools)."""
    return ctx.runner if isinstance(ctx.runner, Runner) else None


def allowed_agents(config: AgentConfig) -> list[str]:
    return list(config.tools.agents)


def jp_query(ctx: ToolContext, args: JsonDict) -> str:
    from jpfs.services.run.query import Query, run

    ws = ctx.ws()
    config = ctx.settings
    runner = runner_of(ctx)
    text = str(args["query"])
    target = str(args.get("id") or "new")
    overrides = [str(o) for o in args.get("overrides") or []]
    budget = {k: args[k] for k in ("budget_tokens", "budget_usd") if args.get(k) is not None}
    report = ctx.on_outcome
    if target == "new":
        name = str(args.get("config") or "")
        if not name:
            raise ToolError(
                "jp_query: config is required to start a new sub-agent (one of:"
                f" {', '.join(allowed_agents(config)) or 'none'}); to continue one, pass its id"
            )
        if name not in allowed_agents(config):
            raise ToolError(
                f"profile {name!r} is not one this agent may start"
                f" (allowed: {', '.join(allowed_agents(config)) or 'none'})"
            )
        call_id = ctx.call_id
        existing = control.find_child_for_call(ws.conv_root, ctx.conversation, call_id)
        if existing is not None:
            # A crash between creating the child and writing its task.md: hand it the task.
            empty = tree.state_of(Conversation(ws.conv_root, existing)) == "empty"
            again = text if empty else None
            handed = Query(again, conv_id=existing, within=ctx.conversation)
            return run(ws, handed, runner=runner).wrapped()
        parent = Conversation(ws.conv_root, ctx.conversation)
        control.check_limits(ws, parent, agent=True, starting=False)
        try:
            child = Query(
                text,
                parent=ctx.conversation,
                agent=name,
                overrides=overrides,
                extra={"origin_call": call_id or None},
                actor=creation.agent_actor(record.agent_identity(config.name or "agent")),
                budget_tokens=args.get("budget_tokens"),
                budget_usd=args.get("budget_usd"),
            )
            result = run(ws, child, runner=runner)
        except (ProfileError, LimitError) as exc:
            raise ToolError(str(exc)) from exc
        return _answer(result, report)
    if overrides or budget:
        given = "overrides" if overrides else " and ".join(budget)
        raise ToolError(f'{given} apply only when creating a conversation (id="new")')
    going_on = Query(
        text,
        conv_id=target,
        within=ctx.conversation,
        actor=creation.agent_actor(record.agent_identity(config.name or "agent")),
    )
    result = run(ws, going_on, runner=runner)
    return _answer(result, report)


def _answer(result: Outcome, report: Callable[[Any], None] | None) -> str:
    """The sub-agent's answer; a failed or killed one is an error result for the caller
    (MCP clients see ``isError``), with the same ``<error ...>`` text. ``report`` (an
    adapter's ``on_outcome`` service) is handed the whole outcome, its usage included."""
    if report is not None:
        report(result)
    if result.state in (State.FAILED, State.KILLED):
        raise ToolFailure(result.wrapped())
    return result.wrapped()


def jp_conversation_list(ctx: ToolContext, args: JsonDict) -> str:
    ws = ctx.ws()
    left_out: list[str] = []
    # With this machine's cache, as `jpfs conversation ls` lists: a child whose failure
    # its own files could not hold (kept in .jpfs/local/failures) shows failed here too.
    items = tree.listing(
        ws.conv_root,
        ctx.conversation or None,
        include_hidden=True,
        cache_dir=ws.local_dir,
        left_out=left_out,
    )
    rows = [
        {
            k: v
            for k, v in i.to_json().items()
            if k in ("id", "title", "agent", "status", "events_count")
        }
        for i in items
    ]
    text = json.dumps(rows, indent=1) if rows else "[] (no sub-conversations yet)"
    # After the list, so that it still parses once these lines are cut off.
    return "".join([text, *(f"\nnote: {tree.left_out_note(rel)}" for rel in left_out)])


def jp_conversation_print(ctx: ToolContext, args: JsonDict) -> str:
    ws = ctx.ws()
    conv_id = scope.resolve(ws.conv_root, str(args["id"]), within=ctx.conversation)
    last = args.get("last")
    return transcript.markdown(Conversation(ws.conv_root, conv_id), int(last) if last else None)


def jp_conversation_grep(ctx: ToolContext, args: JsonDict) -> str:
    ws = ctx.ws()
    only: Sequence[str] = ()
    if args.get("id"):
        only = [scope.resolve(ws.conv_root, str(args["id"]), within=ctx.conversation)]
    matches = search.grep(
        ws.conv_root,
        str(args["pattern"]),
        only=only,
        under=ctx.conversation or None,
        regex=bool(args.get("regex", False)),
        ignore_case=bool(args.get("ignore_case", False)),
        include_hidden=True,
        cache_dir=ws.local_dir,
    )
    # One line per distinct `ID: text`: a final reply is in its event and in result.md,
    # and the same line twice tells the model nothing but costs it tokens.
    unique = list(dict.fromkeys(f"{m.id}: {m.text}" for m in matches))
    if not unique:
        return "no matches"
    lines = unique[:200]
    if len(unique) > 200:
        lines.append(f"[truncated: showing 200 of {len(unique)} matching lines]")
    return "\n".join(lines)


# A new sub-agent's budget (jpfs.services.conversations.budgets): never more than the caller has left.
BUDGET_PROPERTIES: JsonDict = {
    "budget_tokens": {
        "type": "integer",
        "minimum": 1,
        "description": "Most tokens the new sub-agent and its own sub-agents may spend"
        " (at most what you have left).",
    },
    "budget_usd": {
        "type": "number",
        "exclusiveMinimum": 0,
        "description": "Most USD the new sub-agent and its own sub-agents may spend"
        " (at most what you have left).",
    },
}


def profile_descriptions(agents_dir: Path, names: Sequence[str]) -> str:
    out = []
    for name in names:
        try:
            desc = profiles.load(agents_dir, name).settings.description
        except ProfileError:
            desc = "(profile missing or invalid)"
        out.append(f"- {name}: {desc}")
    return "\n".join(out)


def build(config: Mapping[str, Any], agents_dir: Path | None) -> dict[str, Tool]:
    agents = allowed_agents(agentconfig.view(config))
    described = profile_descriptions(agents_dir, agents) if agents_dir is not None else ""
    query_schema: JsonDict = {
        "type": "object",
        "properties": {
            "config": {
                "type": "string",
                "enum": agents,
                "description": 'The sub-agent profile to start (only with id="new").',
            },
            "query": {
                "type": "string",
                "description": "The task for a new sub-agent, or your next message / your"
                " answers to its questions when continuing one.",
            },
            "id": {
                "type": "string",
                "minLength": 1,
                "description": '"new" (default) to start a sub-agent, or the conversation_id'
                " of one of your sub-conversations to continue it or answer its questions.",
                "default": "new",
            },
            "overrides": {
                "type": "array",
                "items": {"type": "string"},
                "description": "KEY=VALUE settings for a new sub-agent; only keys its profile"
                " allows (usually just model=...).",
            },
            **BUDGET_PROPERTIES,
        },
        # config names the profile of a *new* sub-agent: continuing one needs only
        # id and query (the seeds' form), so config is checked where it applies.
        "required": ["query"],
        "additionalProperties": False,
    }
    return {
        "jp_query": Tool(
            "jp_query",
            "Delegate to a sub-agent in a child conversation and wait for it. Returns"
            ' <response conversation_id="ID">final answer</response>, or'
            ' <questions conversation_id="ID">...</questions> when the sub-agent first needs'
            " answers: call jp_query again with id=ID and your answers as query. Several"
            " jp_query calls in one reply run in parallel. Profiles:\n" + described,
            query_schema,
            jp_query,
        ),
        "jp_conversation_list": Tool(
            "jp_conversation_list",
            "List your sub-conversations (all descendants, hidden ones included) as JSON:"
            " id, title, agent, status, events_count.",
            {"type": "object", "properties": {}, "additionalProperties": False},
            jp_conversation_list,
        ),
        "jp_conversation_print": Tool(
            "jp_conversation_print",
            "Print one of your sub-conversations (task, Q&A and events) as markdown.",
            {
                "type": "object",
                "properties": {
                    "id": {
                        "type": "string",
                        "minLength": 1,
                        "description": "A descendant's conversation_id.",
                    },
                    "last": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "Only the last N events.",
                    },
                },
                "required": ["id"],
                "additionalProperties": False,
            },
            jp_conversation_print,
        ),
        "jp_conversation_grep": Tool(
            "jp_conversation_grep",
            "Search the text of your sub-conversations; one 'ID: line' per match (max 200).",
            {
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Text to find."},
                    "id": {
                        "type": "string",
                        "minLength": 1,
                        "description": "Search only this descendant.",
                    },
                    "regex": {"type": "boolean", "description": "pattern is a regular expression"},
                    "ignore_case": {"type": "boolean"},
                },
                "required": ["pattern"],
                "additionalProperties": False,
            },
            jp_conversation_grep,
        ),
    }
