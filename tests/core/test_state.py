"""The state function on its own: every row of the table in protocol/onboarding.md."""

from __future__ import annotations

import pytest

from jpfs.core.state import Snapshot, State, derive, onboarding_of

Q1 = "# Questions\n\n## Round 1\n\n1. Which branch?\n"
Q1_READY = "# Questions\n\n## Round 1\n\nStatus: ready, no questions.\n"
Q2_READY = Q1 + "\n## Round 2\n\nStatus: ready, starting work.\n"
A1 = "# Answers\n\n## Round 1\n\n1. main\n"
A1_TEMPLATE = "# Answers\n\n## Round 1\n\n<!-- answer below -->\n"


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        (Snapshot(), State.EMPTY),
        (Snapshot(has_task=True, status="killed"), State.KILLED),
        (Snapshot(has_task=True, status="failed"), State.FAILED),
        (Snapshot(has_task=True), State.ONBOARDING),
        (Snapshot(has_task=True, questions=Q1), State.WAITING),
        (Snapshot(has_task=True, questions=Q1, answers=A1_TEMPLATE), State.WAITING),
        (Snapshot(has_task=True, questions=Q1, answers=A1), State.ONBOARDING),
        (Snapshot(has_task=True, questions=Q1_READY), State.RUNNING),
        (Snapshot(has_task=True, questions=Q2_READY, answers=A1), State.RUNNING),
        (Snapshot(has_task=True, onboarding=False), State.RUNNING),
        (Snapshot(has_task=True, last_role="user", last_seq=1), State.RUNNING),
        (Snapshot(has_task=True, last_role="tool", last_seq=3), State.RUNNING),
        (
            Snapshot(has_task=True, last_role="assistant", last_seq=2, last_has_tool_calls=True),
            State.RUNNING,
        ),
        (Snapshot(has_task=True, last_role="assistant", last_seq=2), State.FINISHING),
        (Snapshot(has_task=True, last_role="assistant", last_seq=2, result_event=2), State.IDLE),
        (Snapshot(has_task=True, last_role="error", last_seq=2), State.FAILED),
        (Snapshot(has_task=False, last_role="user", last_seq=1, onboarding=False), State.RUNNING),
        (Snapshot(has_task=True, template=True, questions=Q1), State.WAITING),
        (Snapshot(has_task=True, template=True, questions=Q1_READY), State.IDLE),
    ],
)
def test_state_table(snap: Snapshot, expected: State) -> None:
    assert derive(snap) == expected


def test_onboarding_rounds() -> None:
    ob = onboarding_of(Snapshot(has_task=True, questions=Q2_READY, answers=A1))
    assert (ob.rounds, ob.ready) == (2, True)
