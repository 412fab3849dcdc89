"""The run loop's hooks: what the owner of a run adds, without a subclass of Runner."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from jpfs import api
from jpfs.core.conversation import Conversation
from jpfs.core.state import State
from jpfs.core.workspace import open_workspace
from jpfs.errors import Cancelled
from jpfs.infra.providers.base import Reply
from jpfs.services.conversations.lifecycle import new_conversation
from jpfs.services.daemon.actions import RunWatch
from jpfs.services.run.hooks import Hooks
from tests.conftest import write_profile

TWO_TURNS = """
model = "m"
provider = "script"
[tools]
allow = ["fs_list_files"]
[[script.turns]]
tool_calls = [{ name = "fs_list_files", input = {} }]
[[script.turns]]
text = "done"
"""


def test_each_hook_is_called_at_its_point_of_the_loop(ws: Path) -> None:
    write_profile(ws, "s", TWO_TURNS, allowed=True)
    w = open_workspace(ws)
    conv = new_conversation(w, "h", agent="s", task="list")
    seen: list[str] = []

    def before_call(c: Conversation) -> None:
        seen.append(f"call {c.id}")

    def after_call(c: Conversation, reply: Reply) -> None:
        seen.append(f"reply {reply.text or 'tools'}")

    def after_commit(c: Conversation, event: str) -> None:
        seen.append(f"commit {event}")

    hooks = Hooks(before_call, after_call, after_commit, lambda text: seen.append("note"))
    assert api.runner(w, hooks=hooks).run(conv.id) is State.IDLE
    calls = [s for s in seen if s.startswith(("call", "reply"))]
    assert calls == ["call h", "reply tools", "call h", "reply done"]
    assert "commit assistant" in seen and "commit tool" in seen
    assert seen.index("commit result") > seen.index("reply done")
    assert "note" in seen


def test_the_daemons_hooks_stop_a_run_before_its_next_call(ws: Path) -> None:
    write_profile(ws, "s", TWO_TURNS, allowed=True)
    w = open_workspace(ws)
    conv = new_conversation(w, "d", agent="s", task="list")
    calls: list[int] = []  # the daemon's pool hears of each call (Pool.calling)
    watch = RunWatch(stopping=threading.Event(), cancel=threading.Event())
    watch.on_call = lambda: calls.append(watch.provider_calls)
    runner = api.runner(w, cancel=watch.cancel, hooks=watch.hooks())
    runner.work_step(conv)  # the first user event
    assert calls == []
    assert runner.work_step(conv)  # a model turn: counted
    assert (watch.provider_calls, watch.last_note) == (1, "[d] model turn (m)")
    assert calls == [1]
    watch.stopping.set()
    with pytest.raises(Cancelled):
        runner.run(conv.id)  # the tool step runs and is committed; the next call is not made
    assert watch.cancel.is_set() and watch.provider_calls == 1
    assert [e.role for e in conv.events()] == ["user", "assistant", "tool"]
