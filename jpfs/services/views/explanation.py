"""``jpfs blame --explain LINE``: everything the record holds about the step that wrote
one line: the task, the onboarding questions and answers, the model turn and its tool
call, the tool's result, the model and what the turn cost.

The files are read like blame reads them (:mod:`.provenance`): only those the line's
commit names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jpfs.core import prices
from jpfs.core.usage import COUNTS, dollars
from jpfs.errors import NotFoundError
from jpfs.infra.providers.base import Usage
from jpfs.services.views.provenance import OUTSIDE, Line, blame, event_meta, read_record

RESULT_LINES = 20  # of the tool's result: enough to recognise it


@dataclass(frozen=True)
class Explanation:
    line: Line
    task: str | None = None
    questions: str | None = None
    answers: str | None = None
    turn: str | None = None  # the model's text in the turn
    call: dict[str, Any] | None = None  # the tool call: name and input
    result: str | None = None  # the tool's result, its first lines
    usage: dict[str, Any] | None = None  # the turn's tokens and cost_usd

    def to_json(self) -> dict[str, Any]:
        return {
            **self.line.to_json(),
            "task_text": self.task,
            "questions": self.questions,
            "answers": self.answers,
            "turn_text": self.turn,
            "call": self.call,
            "result": self.result,
            "usage": self.usage,
        }

    def text(self) -> str:
        ln = self.line
        head = [f"{ln.path}:{ln.line}: {ln.text}", f"commit {ln.commit}"]
        if ln.conversation is None and ln.conversations:
            # A squash: its one commit quotes several writers' messages, and git blame
            # cannot split its lines between them. Name them; do not call it a person's.
            names = ", ".join(ln.conversations)
            head += [
                f"written by a squash of conversations {names}",
                "(one commit holds all their work, so blame cannot tell which of them wrote"
                ' this line: see "What survives" in protocol/provenance.md)',
            ]
            return "\n".join(head) + "\n"
        if ln.conversation is None or ln.conversation == OUTSIDE:
            who = ln.conversation or f"{ln.author} (not written by a jpfs agent)"
            return "\n".join([*head, f"written by {who}"]) + "\n"
        head += [
            f"conversation {ln.conversation}" + (f" ({ln.agent})" if ln.agent else ""),
            f"model {ln.model or '?'}",
        ]
        if self.usage:
            counts = ", ".join(f"{k.removesuffix('_tokens')} {self.usage[k]}" for k in COUNTS)
            head.append(f"usage {counts}, {dollars(self.usage.get('cost_usd'))}")
        if ln.turn:
            head.append(f"turn {ln.turn}")
        if ln.event:
            head.append(f"event {ln.event}")
        parts = ["\n".join(head)]
        for title, body in (
            ("task", self.task),
            ("questions", self.questions),
            ("answers", self.answers),
            ("turn", self.turn),
            ("tool call", json.dumps(self.call, indent=1) if self.call else None),
            ("tool result", self.result),
        ):
            if body and body.strip():
                parts.append(f"## {title}\n\n{body.strip()}")
        return "\n\n".join(parts) + "\n"


def explain(
    root: Path,
    branch: str,
    cwd: Path,
    path: str,
    line: int,
    *,
    rev: str | None = None,
    within: str | None = None,
    table: Mapping[str, prices.Price] | None = None,
) -> Explanation:
    """The :class:`Explanation` of line ``line`` of ``path`` (scoped like :func:`blame`)."""
    rows = blame(root, branch, cwd, path, start=line, end=line, rev=rev, within=within)
    if not rows:
        raise NotFoundError(f"{path} has no line {line}")
    ln = rows[0]
    conv = ln.conversation
    if conv is None or conv == OUTSIDE:
        return Explanation(ln)
    files = [f"{conv}/{name}" for name in ("task.md", "questions.md", "answers.md")]
    texts = read_record(root, branch, [*files, *(p for p in (ln.turn, ln.event) if p)])
    turn_meta = event_meta(texts.get(ln.turn or ""))
    tool_meta = event_meta(texts.get(ln.event or ""))
    call = next(
        (c for c in turn_meta.get("tool_calls") or [] if isinstance(c, dict)
         and c.get("id") == tool_meta.get("tool_call_id")),
        None,
    )  # fmt: skip
    if call is not None:
        raw = call.get("input")
        try:
            args = raw if isinstance(raw, dict) else json.loads(str(raw))
        except ValueError:
            args = raw
        call = {"name": call.get("name"), "input": args}
    return Explanation(
        ln,
        task=texts.get(files[0]),
        questions=texts.get(files[1]),
        answers=texts.get(files[2]),
        turn=_body(texts.get(ln.turn or "")),
        call=call,
        result=_head(_body(texts.get(ln.event or ""))),
        usage=_usage(turn_meta, ln.model or "", table or {}),
    )


def _body(text: str | None) -> str | None:
    if text is None:
        return None
    from jpfs.core import frontmatter
    from jpfs.errors import FormatError

    try:
        return frontmatter.parse(text)[1]
    except FormatError:
        return text


def _head(text: str | None) -> str | None:
    if text is None:
        return None
    lines = text.splitlines()
    more = len(lines) - RESULT_LINES
    return "\n".join(lines[:RESULT_LINES]) + (f"\n[... {more} more lines]" if more > 0 else "")


def _usage(
    meta: Mapping[str, Any], model: str, table: Mapping[str, prices.Price]
) -> dict[str, Any] | None:
    """The turn's usage as recorded; dollars priced now when it was recorded without."""
    data = meta.get("usage")
    if not isinstance(data, dict):
        return None
    counts = {
        k: v if isinstance(v, int) and not isinstance(v, bool) else 0
        for k in COUNTS
        for v in [data.get(k)]
    }
    cost = data.get("cost_usd")
    if not isinstance(cost, int | float) or isinstance(cost, bool):
        cost = prices.cost_of(Usage(*counts.values()), str(meta.get("model") or model), table)
    return {**counts, "cost_usd": cost}
