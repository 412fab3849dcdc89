"""Branch tools for callers of ``workspace = "branch"`` sub-agents: ``merge``,
``branch_diff`` and ``branch_discard``.

Caller only: every id goes through :func:`jpfs.core.scope.resolve` with the calling
conversation as the scope, so only its strict descendants can be named. Best-of-N is
these three: start N implementers on one task, compare their ``branch_diff``, ``merge``
the best and ``branch_discard`` the rest.
"""

from __future__ import annotations

from typing import Any

from jpfs.core.tool import JsonDict, Tool, ToolContext

DIFF_MAX_CHARS = 100_000


def _author(ctx: ToolContext) -> Any:
    """The calling agent authors its merges (a top-level caller: the git identity)."""
    name = ctx.settings.name
    if not ctx.conversation or not name:
        return None
    from jpfs.core.record import agent_identity

    return agent_identity(name)


def merge_tool(ctx: ToolContext, args: JsonDict) -> str:
    from jpfs.services.forks import merge

    result = merge.merge(ctx.ws(), str(args["id"]), within=ctx.conversation, author=_author(ctx))
    return result.summary()


def branch_diff(ctx: ToolContext, args: JsonDict) -> str:
    from jpfs.core import scope
    from jpfs.services.forks import diffs

    ws = ctx.ws()
    conv_id = scope.resolve(ws.conv_root, str(args["id"]), within=ctx.conversation)
    text = diffs.diff(ws, conv_id, stat=bool(args.get("stat", False)))
    if not text.strip():
        return f"{conv_id}: no committed changes on its branch"
    if len(text) > DIFF_MAX_CHARS:
        cut = text[:DIFF_MAX_CHARS].rsplit("\n", 1)[0]
        return f"{cut}\n[truncated at {DIFF_MAX_CHARS:,} characters; use stat=true for a summary]"
    return text


def branch_discard(ctx: ToolContext, args: JsonDict) -> str:
    from jpfs.services.forks import worktrees

    done = worktrees.discard(ctx.ws(), str(args["id"]), within=ctx.conversation)
    return "discarded the branch and worktree of " + ", ".join(done)


def _schema(props: dict[str, JsonDict]) -> JsonDict:
    return {
        "type": "object",
        "properties": props,
        "required": ["id"],
        "additionalProperties": False,
    }


_ID = {
    "type": "string",
    "minLength": 1,
    "description": "Id of one of your sub-conversations whose profile works on a branch.",
}

TOOLS: dict[str, Tool] = {
    t.name: t
    for t in (
        Tool(
            "merge",
            "Merge the git branch of one of your sub-conversations (a branch workspace) into "
            "your own workspace: your branch, or the checked-out branch at the top. The child "
            "must not be running. On a conflict, or when the merge would overwrite uncommitted "
            "changes, nothing is changed and the error names the files. Returns the merge "
            "commit and a diff stat.",
            _schema({"id": _ID}),
            merge_tool,
        ),
        Tool(
            "branch_diff",
            "Show what merging a sub-conversation's branch would bring: the diff of its "
            "committed changes since it forked (or since its last merge); stat=true gives "
            f"the per-file summary only. At most {DIFF_MAX_CHARS:,} characters.",
            _schema(
                {
                    "id": _ID,
                    "stat": {"type": "boolean", "description": "Summary only (default false)."},
                }
            ),
            branch_diff,
        ),
        Tool(
            "branch_discard",
            "Throw away a sub-conversation's branch and worktree (and those of its own "
            "branch sub-conversations); its conversation record stays. Use it for the losers "
            "of a best-of-N comparison. Refused while it runs.",
            _schema({"id": _ID}),
            branch_discard,
        ),
    )
}
