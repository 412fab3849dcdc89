"""The state of a conversation, as a pure function of its files.

Nothing here touches the disk: :func:`derive` takes a :class:`Snapshot` (what the
files say) and returns the :class:`State` and who must act. The daemon, ``jpfs query``
and ``jpfs tree`` all call it, so a restart, a crash or a human edit can never leave
them disagreeing about what happens next (level-triggered, not edge-triggered).

    files                                                       state       who acts
    status = "killed" in conversation.toml                      killed      nobody
    status = "failed"                                           failed      nobody (until new input)
    no task.md                                                  empty       nobody
    onboarding on, not ready, no questions / last round answered onboarding agent
    last questions round unanswered                             waiting     caller
    ready or onboarding off, no final reply after last input     running     agent
    final reply, result.md not yet written for it               finishing   agent (runtime)
    final reply and result.md for it                            idle        caller
    an onboarding template (mode = "template") once ready       idle        caller
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum


class State(StrEnum):
    EMPTY = "empty"
    ONBOARDING = "onboarding"
    WAITING = "waiting"
    RUNNING = "running"
    FINISHING = "finishing"
    IDLE = "idle"
    KILLED = "killed"
    FAILED = "failed"


AGENT_ACTS = frozenset({State.ONBOARDING, State.RUNNING, State.FINISHING})

# ASCII digits, at most six: int() of a 5,000-digit number raises (Python's limit).
ROUND_RE = re.compile(r"^##\s+Round\s+([0-9]{1,6})\s*$", re.MULTILINE)
READY_RE = re.compile(r"^Status:\s*ready\b", re.MULTILINE | re.IGNORECASE)
COMMENT_RE = re.compile(r"<!--.*?-->", re.DOTALL)


def split_rounds(text: str) -> dict[int, str]:
    """``## Round N`` sections of questions.md / answers.md -> {N: section body}."""
    rounds: dict[int, str] = {}
    matches = list(ROUND_RE.finditer(text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        rounds[int(m.group(1))] = text[m.end() : end]
    return rounds


def has_content(section: str) -> bool:
    """An answers section counts once it holds something besides template comments."""
    return bool(COMMENT_RE.sub("", section).strip())


@dataclass(frozen=True)
class Snapshot:
    has_task: bool = False
    onboarding: bool = True
    status: str = "active"
    questions: str | None = None  # questions.md text
    answers: str | None = None  # answers.md text
    # Role of the last event file ("user", "assistant", "tool", "error"), None if no events.
    last_role: str | None = None
    last_seq: int = 0
    # Whether the last assistant event asked for tool calls (then it is not final).
    last_has_tool_calls: bool = False
    # The event seq result.md was written for (0 if no result.md).
    result_event: int = 0
    # An onboarding template (library ``onboard``, batch onboarding): once ready it
    # does no work itself; its children (one per call or task) do.
    template: bool = False
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Onboarding:
    rounds: int  # questions rounds written by the agent
    ready: bool
    answered: bool  # the last round has a matching, non-empty answers round


def onboarding_of(snap: Snapshot) -> Onboarding:
    q = split_rounds(snap.questions or "")
    a = split_rounds(snap.answers or "")
    if not q:
        return Onboarding(0, False, True)
    last = max(q)
    ready = bool(READY_RE.search(q[last]))
    answered = last in a and has_content(a[last])
    return Onboarding(last, ready, answered)


def derive(snap: Snapshot) -> State:
    if snap.status == "killed":
        return State.KILLED
    if snap.status == "failed":
        return State.FAILED
    if not snap.has_task and snap.last_role is None:
        return State.EMPTY
    if snap.onboarding and snap.last_role is None:
        ob = onboarding_of(snap)
        if not ob.ready:
            return State.ONBOARDING if ob.answered else State.WAITING
    if snap.template and snap.last_role is None:
        return State.IDLE
    if snap.last_role is None or snap.last_role in ("user", "tool"):
        return State.RUNNING
    if snap.last_role == "assistant" and snap.last_has_tool_calls:
        return State.RUNNING
    if snap.last_role == "error":
        return State.FAILED
    if snap.result_event != snap.last_seq:
        return State.FINISHING
    return State.IDLE
