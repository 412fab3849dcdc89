"""Onboarding: before it works, a sub-agent may interview its caller through files.

    task.md       caller -> agent   the task
    questions.md  agent  -> caller  one ``## Round N`` per round: numbered questions
                                    (+ assumptions), or ``Status: ready ...``
    answers.md    caller -> agent   a matching ``## Round N`` with the answers

One onboarding step is one model call with two tools, ``ask_caller`` and
``start_work``; a plain text reply also counts as ready. After ``max_rounds``
answered rounds the agent is not asked again: jpfs writes a ready round saying it
proceeded without further answers. When work starts, the task and the whole Q&A
become the first user message (:func:`work_brief`), so the event files show exactly
what the agent received.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jpfs.core import models, prices, profiles, secrets, tree, usage
from jpfs.core.conversation import ANSWERS, QUESTIONS, TASK, Conversation
from jpfs.core.messages import assistant_content
from jpfs.core.state import READY_RE, onboarding_of, split_rounds
from jpfs.core.tool import Tool, check_arguments
from jpfs.errors import ProviderError, ToolError
from jpfs.infra.providers.base import Reply, Request, ToolSpec, Usage

if TYPE_CHECKING:
    from jpfs.services.conversations.runs import RunContext

QUESTIONS_HEADER = (
    "# Questions\n\n"
    "The agent asks these before it starts. Answer under the same `## Round N` heading in\n"
    "answers.md (or run `jpfs answer {id}`).\n"
)
ANSWERS_HEADER = "# Answers\n"
_STEP_ATTEMPTS = 3

INSTRUCTIONS = """\
Before you start, make sure you understand the task well enough to do it right.
This is onboarding round {round} of at most {max_rounds}.
- If something important is unclear (goal, scope, constraints, expected output),
  call `ask_caller` with a few precise, numbered-ready questions. Record guesses you
  are comfortable making as `assumptions` instead of asking.
- If you have what you need, call `start_work` (optionally listing assumptions).
Do not start the work itself now."""

ASK = ToolSpec(
    "ask_caller",
    "Ask your caller questions before starting the task. Only available during onboarding.",
    {
        "type": "object",
        "properties": {
            "questions": {
                "type": "array",
                "items": {"type": "string"},
                "description": "The questions, one per item, each answerable on its own.",
            },
            "assumptions": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Assumptions you make instead of asking.",
            },
        },
        "required": ["questions"],
        "additionalProperties": False,
    },
)
START = ToolSpec(
    "start_work",
    "Declare that you have no (further) questions and are ready to start the task.",
    {
        "type": "object",
        "properties": {
            "assumptions": {"type": "array", "items": {"type": "string"}},
            "note": {"type": "string", "description": "Anything the caller should know."},
        },
        "additionalProperties": False,
    },
)


def max_rounds(conv: Conversation) -> int:
    return conv.settings.onboarding.max_rounds


def qa_text(conv: Conversation) -> str:
    """The rounds so far, questions and answers interleaved."""
    q = split_rounds(conv.read(QUESTIONS) or "")
    a = split_rounds(conv.read(ANSWERS) or "")
    parts = []
    for n in sorted(q):
        label = "" if READY_RE.search(q[n]) else "Questions:\n"
        parts.append(f"### Round {n}\n\n{label}{q[n].strip()}\n")
        if n in a:
            parts.append(f"Answers:\n{a[n].strip()}\n")
    return "\n".join(parts)


def work_brief(conv: Conversation) -> str:
    """The first user message of the work phase: the task plus the whole Q&A, with any
    secret a caller pasted into them redacted (it is sent, and recorded as an event)."""
    task = (conv.read(TASK) or "").strip()
    qa = qa_text(conv)
    if not qa:
        return secrets.redact(task + "\n")[0]
    brief = f"{task}\n\n## Onboarding (questions and answers before starting)\n\n{qa}"
    return secrets.redact(brief)[0]


def _bullets(title: str, items: Sequence[str]) -> str:
    items = [str(i).strip() for i in items if str(i).strip()]
    return f"\n{title}\n" + "".join(f"- {i}\n" for i in items) if items else ""


def append_round(conv: Conversation, body: str) -> int:
    text = conv.read(QUESTIONS) or QUESTIONS_HEADER.format(id=conv.id)
    n = max(split_rounds(text), default=0) + 1
    body = secrets.redact(body)[0]  # the agent's words go into the record
    conv.write(QUESTIONS, f"{text.rstrip()}\n\n## Round {n}\n\n{body.strip()}\n")
    return n


def append_answers(conv: Conversation, answer: str) -> int:
    """Write the caller's answer as the answers round matching the last questions round."""
    rounds = onboarding_of(tree.snapshot(conv)).rounds
    text = conv.read(ANSWERS) or ANSWERS_HEADER
    existing = split_rounds(text)
    if rounds in existing:
        # An empty template section (e.g. from `jpfs answer` with no text) is replaced.
        text = text.split(f"## Round {rounds}")[0]
    answer = secrets.redact(answer)[0]  # jpfs writes it into the record
    conv.write(ANSWERS, f"{text.rstrip()}\n\n## Round {rounds}\n\n{answer.strip()}\n")
    return rounds


def questions_of_round(conv: Conversation, n: int | None = None) -> str:
    rounds = split_rounds(conv.read(QUESTIONS) or "")
    if not rounds:
        return ""
    return rounds[n if n is not None else max(rounds)].strip()


def step(runner: RunContext, conv: Conversation) -> None:
    """One onboarding round: ask, or declare ready (forced at the round limit)."""
    ob = onboarding_of(tree.snapshot(conv))
    limit = max_rounds(conv)
    if ob.rounds >= limit:
        append_round(
            conv,
            f"Status: ready (round limit of {limit} reached): proceeding without further answers.",
        )
        runner.commit(conv, "ready", note="(round limit)")
        return
    round_no = ob.rounds + 1
    brief = work_brief(conv)
    config = conv.settings
    request = Request(
        model=config.model,
        system=_system(runner, conv),
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "text",
                        "text": f"{brief}\n\n---\n"
                        + INSTRUCTIONS.format(round=round_no, max_rounds=limit),
                    }
                ],
            }
        ],
        tools=(ASK, START),
        max_tokens=config.max_tokens,
        timeout=config.timeout,
        phase="onboarding",
        metadata={"conversation": conv.id, "round": round_no},
        thinking=models.thinking_param(config.model, config.thinking_setting()),
        effort=config.effort,
    )
    runner.note(f"[{conv.id}] onboarding round {round_no}")
    reply = _valid_reply(runner, conv, request)
    model = reply.model or request.model
    priced = prices.billed_as(reply.model, request.model, runner.ws.prices)
    label = f"onboarding round {round_no}"
    usage.append_call(conv, label, model, reply.usage, runner.ws.prices, priced)
    ask = next((c for c in reply.tool_calls if c.name == "ask_caller"), None)
    questions = [str(q).strip() for q in (ask.input.get("questions") or [])] if ask else []
    questions = [q for q in questions if q]
    if ask is not None and questions:
        body = "".join(f"{i}. {q}\n" for i, q in enumerate(questions, 1))
        body += _bullets("Assumptions:", ask.input.get("assumptions") or [])
        append_round(conv, body)
        runner.commit(conv, "questions", model=model, usage=reply.usage, priced_as=priced)
        return
    start = next((c for c in reply.tool_calls if c.name == "start_work"), None)
    args: dict[str, Any] = dict(start.input) if start else {}
    if ask is not None:
        args.setdefault("assumptions", ask.input.get("assumptions") or [])
    note = str(args.get("note") or (reply.text if not reply.tool_calls else "")).strip()
    body = "Status: ready, no further questions; starting work.\n"
    body += _bullets("Assumptions:", args.get("assumptions") or [])
    if note:
        body += f"\nNote: {note}\n"
    append_round(conv, body)
    runner.commit(conv, "ready", model=model, usage=reply.usage, priced_as=priced)


def _valid_reply(runner: RunContext, conv: Conversation, request: Request) -> Reply:
    """The model's onboarding step, each tool call valid against its schema.

    An invalid call (``{"question": ...}`` for ``ask_caller``, say) is never taken as
    "ready": it goes back to the agent as a tool error, and it tries again (twice);
    a third invalid step fails the run with the reason.
    """
    messages = list(request.messages)
    spent = Usage()
    for _attempt in range(_STEP_ATTEMPTS):
        reply = runner.complete(conv, dataclasses.replace(request, messages=list(messages)))
        spent = spent + reply.usage
        problems = {c.id: _invalid(c.name, c.input) for c in reply.tool_calls}
        if not any(problems.values()):
            # The step's usage is every attempt's: the invalid ones were paid for too.
            return dataclasses.replace(reply, usage=spent)
        # The reply goes back as received, its thinking first (the API refuses a tool
        # loop whose last assistant message does not start with it).
        calls = [{"id": c.id, "name": c.name, "input": c.input} for c in reply.tool_calls]
        blocks = assistant_content(reply.text, calls, reply.thinking)
        results = [
            {
                "type": "tool_result",
                "tool_use_id": c.id,
                "is_error": bool(problems[c.id]),
                "content": problems[c.id] or "not acted on: another call in this reply was invalid",
            }
            for c in reply.tool_calls
        ]
        messages += [{"role": "assistant", "content": blocks}, {"role": "user", "content": results}]
    bad = "; ".join(p for p in problems.values() if p)
    # Paid for though never acted on: recorded, so that budgets and reports count it.
    table = runner.ws.prices
    priced = prices.billed_as(reply.model, request.model, table)
    usage.append_call(
        conv, "onboarding (invalid steps)", reply.model or request.model, spent, table, priced
    )
    raise ProviderError(
        f"the agent's onboarding step stayed invalid after {_STEP_ATTEMPTS} tries: {bad}"
    )


def _invalid(name: str, arguments: Any) -> str:
    """Why a call of an onboarding tool does not fit its schema ("" when it does)."""
    spec = {ASK.name: ASK, START.name: START}.get(name)
    if spec is None:
        return f"{name}: no such tool during onboarding; call ask_caller or start_work"
    try:
        check_arguments(Tool(spec.name, spec.description, spec.input_schema, _no_run), arguments)
    except ToolError as exc:
        return str(exc)
    return ""


def _no_run(_ctx: Any, _args: Any) -> str:  # the schema check never runs the tool
    return ""


def _system(runner: RunContext, conv: Conversation) -> str:
    return profiles.system_prompt(conv.settings)
