"""A run failed (the conversation's fault) or postponed (the machine's): what is said,
and when the reconciler looks at the conversation again."""

from __future__ import annotations

from pathlib import Path

from jpfs.core.conversation import Conversation
from jpfs.core.workspace import open_workspace
from jpfs.errors import RepositoryFault
from jpfs.services.daemon.lasterror import LastError
from jpfs.services.daemon.outcomes import FAULT_RETRY_MAX, Outcomes
from jpfs.services.daemon.process import Stats
from jpfs.services.daemon.unrecorded import Unrecorded


def outcomes(ws: Path) -> tuple[Outcomes, list[tuple[str, float]], LastError, Stats]:
    workspace = open_workspace(ws)
    looks: list[tuple[str, float]] = []
    errors, stats = LastError(), Stats()
    made = Outcomes(
        workspace, stats, errors, Unrecorded(workspace), lambda c, after: looks.append((c, after))
    )
    return made, looks, errors, stats


def test_a_postponed_run_is_looked_at_again_after_a_doubling_wait(ws: Path) -> None:
    made, looks, errors, stats = outcomes(ws)
    workspace = open_workspace(ws)
    conv = Conversation(workspace.conv_root, "c-full")
    conv.path.mkdir(parents=True)
    (conv.path / "task.md").write_text("Say hello.\n", encoding="utf-8")
    fault = RepositoryFault("No space left on device (x): free some space")
    made.postpone(conv, fault)
    shown = errors.shown(workspace.conv_root, workspace.local_dir) or {}
    assert shown.get("conversation") == "c-full"
    assert shown.get("message") == f"c-full: {fault} (trying again in 1 s)"
    made.done(conv.id)
    for _ in range(7):
        made.postpone(conv, fault)
        made.done(conv.id)
    assert [after for _, after in looks] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, FAULT_RETRY_MAX, 60.0]
    assert stats.failures == 0  # no failure: the machine's fault
    assert not list(conv.path.glob("events/*"))  # no error event either
    made.went_through(conv.id)
    made.postpone(conv, fault)
    made.done(conv.id)
    assert looks[-1] == ("c-full", 1.0)  # through once: its next fault waits a second again
    made.done(conv.id)
    assert looks[-1] == ("c-full", 0.0)  # an ordinary end: looked at again at once


def test_a_claims_wait_is_when_it_is_looked_at_again(ws: Path) -> None:
    made, looks, _errors, _stats = outcomes(ws)
    made.look_again_in("c-held", 3.5)
    made.done("c-held")
    made.done("c-held")
    assert looks == [("c-held", 3.5), ("c-held", 0.0)]
