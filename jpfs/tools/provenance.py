"""``jp_blame``: which conversation, turn and tool call wrote each line of a file.

Read-only, and scoped twice in the service (:func:`jpfs.services.views.provenance.blame`,
``within`` the caller's conversation): lines written by a conversation outside the
caller's subtree show ``(outside your scope)`` and nothing of that conversation, and a
``rev`` must be in the history of the caller's working tree. The path is checked like
every file tool's (relative, no ``..``, no ``.git``, not the conversation record).
"""

from __future__ import annotations

import json

from jpfs.core.tool import JsonDict, Tool, ToolContext
from jpfs.errors import ScopeError
from jpfs.infra.safefs import normalize_relpath
from jpfs.services.views import provenance

MAX_LINES = 400  # a model reads a range; a whole large file would flood its context


def jp_blame(ctx: ToolContext, args: JsonDict) -> str:
    ws = ctx.ws()
    path = normalize_relpath(str(args["path"]))
    record = ws.conv_root_rel.strip("/")
    if path == record or path.startswith(f"{record}/"):
        raise ScopeError(f"{path} is in the conversation record; use jp_conversation_print")
    start = args.get("start")
    end = args.get("end")
    rows = provenance.blame(
        ws.root,
        ws.record_branch,
        ctx.files_root,
        path,
        start=int(start) if start is not None else (1 if end is not None else None),
        end=int(end) if end is not None else None,
        rev=str(args["rev"]) if args.get("rev") else None,
        within=ctx.conversation or "",
    )
    shown = [r.to_json() for r in rows[:MAX_LINES]]
    for row in shown:
        del row["time"]
    text = "\n".join(json.dumps(r, ensure_ascii=False) for r in shown)
    if len(rows) > MAX_LINES:
        text += f"\n[truncated: {MAX_LINES} of {len(rows)} lines; pass start and end]"
    return text or "(empty file)"


TOOLS: dict[str, Tool] = {
    "jp_blame": Tool(
        "jp_blame",
        "Who wrote each line of a file in your working tree: one JSON object per line with"
        " line, commit, conversation (null: a person wrote it; '(outside your scope)': a"
        " conversation outside your subtree), agent, model, task, event (the record path of"
        " the tool event that wrote it, readable with jp_conversation_print), turn, author,"
        f" text. At most {MAX_LINES} lines; use start/end for more.",
        {
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "File path relative to your working tree.",
                },
                "start": {"type": "integer", "minimum": 1, "description": "First line (1-based)."},
                "end": {"type": "integer", "minimum": 1, "description": "Last line."},
                "rev": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Blame the file as of this commit (default: the working tree).",
                },
            },
            "required": ["path"],
            "additionalProperties": False,
        },
        jp_blame,
    )
}
