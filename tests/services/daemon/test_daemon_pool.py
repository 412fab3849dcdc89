"""The agent pool: global limit, fairness across subtrees, graceful and forced stops."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jpfs.core.workspace import open_workspace
from jpfs.infra.git.objects import Tip
from jpfs.services.daemon import pool as poolmod
from jpfs.services.daemon.pool import FairQueue, Job, Pool
from jpfs.services.daemon.reconciler import Reconciler
from jpfs.services.daemon.watcher import CLOSED, MODIFIED
from tests.conftest import git, no_thread_leak, wait_until


def test_a_busy_subtree_does_not_starve_the_others() -> None:
    queue = FairQueue()
    for n in range(5):
        queue.push(f"big/c{n}")
    queue.push("human")
    queue.push("other/x")
    assert not queue.push("human")  # queued once
    order = [queue.pop() for _ in range(len(queue))]
    assert order[:3] == ["big/c0", "human", "other/x"]
    assert order[3:] == [f"big/c{n}" for n in range(1, 5)]
    assert queue.pop() is None


class Harness:
    """Runs that block until released, counting how many run at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.active = 0
        self.peak = 0
        self.started: list[str] = []
        self.done: list[str] = []
        self.stopped: list[str] = []

    def run(self, job: Job) -> None:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.started.append(job.conv_id)
        try:
            while not self.release.wait(0.01):
                if job.stopping.is_set():  # a step ends, the run stops
                    self.stopped.append(job.conv_id)
                    return
        finally:
            with self.lock:
                self.active -= 1

    def finished(self, conv_id: str) -> None:
        with self.lock:
            self.done.append(conv_id)


def test_the_pool_runs_at_most_max_agents_and_each_conversation_once() -> None:
    h = Harness()
    with no_thread_leak():
        pool = Pool(2, h.run, h.finished)
        for n in range(5):
            assert pool.submit(f"c{n}")
        assert not pool.submit("c4")  # already queued
        wait_until(lambda: len(h.started) == 2, message="two runs")
        assert not pool.submit("c0")  # running: not queued twice
        assert pool.snapshot()[1] == 3
        h.release.set()
        wait_until(lambda: len(h.done) == 5, message="all runs")
        pool.stop()
        assert pool.join(5)
    assert h.peak == 2
    assert sorted(h.started) == [f"c{n}" for n in range(5)]


def test_stop_ends_the_runs_after_their_step_and_drops_the_queue() -> None:
    h = Harness()
    with no_thread_leak():
        pool = Pool(1, h.run, h.finished)
        pool.submit("a")
        pool.submit("b")
        wait_until(lambda: h.started == ["a"], message="the first run")
        pool.stop()
        assert pool.join(5)
        assert not pool.submit("c")
    assert h.stopped == ["a"] and h.started == ["a"]
    assert h.done == []  # no follow-up work is scheduled while stopping


def test_a_ranked_pop_takes_the_first_group_head_ranked_lowest() -> None:
    queue = FairQueue()
    for conv_id in ["a", "b/1", "b/2", "c", "d", "e"]:
        queue.push(conv_id)
    ranks = {"a": (2, 0), "b/1": (1, 5), "b/2": (0, 0), "c": (0, 0), "d": (1, 3), "e": (0, 0)}
    # Only group heads are candidates: "b/2" waits behind "b/1" whatever its rank.
    assert queue.pop(ranks.__getitem__) == "c"
    assert queue.pop(ranks.__getitem__) == "e"
    assert queue.pop(ranks.__getitem__) == "d"  # none first: the lowest of the seconds
    assert queue.pop(None) == "a"  # no rank: the usual turn
    assert queue.pop(lambda conv_id: (1, 0)) == "b/1"
    assert queue.pop(ranks.__getitem__) == "b/2"
    assert queue.pop(ranks.__getitem__) is None and len(queue) == 0


def test_a_change_is_looked_at_now_even_when_a_later_look_was_due(ws: Path) -> None:
    """A claim lost to a peer schedules the next look for when the lease may end; a
    human's edit meanwhile must not wait for that (only a lock or a failing repository
    paces the looks)."""
    pool = Pool(1, lambda job: None, lambda conv_id: None)
    try:
        reconciler = Reconciler(
            open_workspace(ws), pool, debounce=0.05, settle=0.3, scan_interval=30.0
        )
        later = time.monotonic() + 100
        reconciler.due["notes"] = later
        reconciler.note_change("notes/files/note-0.md", CLOSED, False)
        assert reconciler.due["notes"] <= time.monotonic()
        reconciler.due["locked"] = later
        reconciler.backoff.next("locked")  # locked elsewhere: its looks are paced
        reconciler.note_change("locked/files/note-0.md", CLOSED, False)
        assert reconciler.due["locked"] == later
    finally:
        pool.stop()
        assert pool.join(5.0)


def test_files_waiting_to_settle_are_looked_at_again_when_the_sync_moves_the_record(
    ws: Path,
) -> None:
    """A merge writes a peer's files before it moves the branch: seen in between, such a
    file is no file of the record's yet and waits a settle like a human's save. When the
    sync says the record moved, it is looked at again at once; a human's save still in
    progress keeps waiting."""
    workspace = open_workspace(ws)
    pool = Pool(1, lambda job: None, lambda conv_id: None)
    try:
        reconciler = Reconciler(workspace, pool, debounce=0.05, settle=120.0, scan_interval=30.0)
        reconciler.head = Tip(workspace.conv_root)
        for conv_id in ("merged", "draft"):
            (workspace.conv_root / conv_id).mkdir()
            (workspace.conv_root / conv_id / "task.md").write_text("# Hi\n", encoding="utf-8")
            reconciler.note_change(f"{conv_id}/task.md", MODIFIED, False)  # not closed yet
        reconciler.process_due()
        later = time.monotonic() + 60
        assert reconciler.due["merged"] > later and reconciler.due["draft"] > later

        # What the merge wrote becomes the record's (the branch moves), the draft not.
        before = git(workspace.conv_root, "rev-parse", "HEAD").strip()
        git(workspace.conv_root, "add", "merged/task.md")
        git(workspace.conv_root, "commit", "-q", "-m", "a peer's task")
        reconciler.record_moved(before, git(workspace.conv_root, "rev-parse", "HEAD").strip())
        reconciler.handle(reconciler.inbox.get_nowait())
        now = time.monotonic()
        assert reconciler.due["merged"] <= now and reconciler.due["draft"] <= now
        reconciler.process_due()
        assert "merged" not in reconciler.due  # looked at: no longer waiting
        assert reconciler.due["draft"] > time.monotonic() + 60  # still a save in progress
    finally:
        pool.stop()
        assert pool.join(5.0)


def test_what_a_sync_wrote_is_looked_at_without_waiting_for_file_events(ws: Path) -> None:
    """A merge's new files reach the watcher as bare "created" events, a debounce later:
    the files that may call for work (a task, answers, mail) are looked at as soon as
    the sync says the record moved; a peer's transcript and result are left to the
    watcher, and so is everything when the commits cannot be compared."""
    workspace = open_workspace(ws)
    pool = Pool(1, lambda job: None, lambda conv_id: None)
    try:
        reconciler = Reconciler(workspace, pool, debounce=0.05, settle=120.0, scan_interval=30.0)
        root = workspace.conv_root
        before = git(root, "rev-parse", "HEAD").strip()
        for name in ("asked/task.md", "mailed/inbox/0001-status.md", "done/result.md"):
            (root / name).parent.mkdir(parents=True)
            (root / name).write_text("# Hi\n", encoding="utf-8")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "a peer's record")
        after = git(root, "rev-parse", "HEAD").strip()

        reconciler.record_moved(before, "0" * 40)  # not a commit here: nothing noted
        reconciler.handle(reconciler.inbox.get_nowait())
        assert reconciler.due == {}

        reconciler.record_moved(before, after)
        reconciler.handle(reconciler.inbox.get_nowait())
        assert sorted(reconciler.due) == ["asked", "mailed"]
        assert all(due <= time.monotonic() for due in reconciler.due.values())
        # Whole files: nothing waits a settle (120 s here) before it is looked at.
        assert reconciler.settling.settled_at({"asked/task.md"}, 120.0) <= time.monotonic()
    finally:
        pool.stop()
        assert pool.join(5.0)


def test_a_run_is_about_to_start_from_its_pop_until_it_runs_and_after_one_ends() -> None:
    """Pool.starting: what a sync cycle woken by a run's end waits for (its claims)."""
    claimed, run_on, phases = threading.Event(), threading.Event(), threading.Event()

    def run(job: Job) -> None:
        claimed.wait(30)  # the claim of a run in flight
        job.phase = "running"
        run_on.wait(30)
        job.phase = "ended"
        phases.wait(30)  # the release of its lease, which wakes the cycle

    with no_thread_leak():
        pool = Pool(1, run, lambda conv_id: None)
        try:
            assert not pool.starting()  # nothing queued
            pool.submit("a")
            wait_until(lambda: pool.snapshot()[0], message="a taken from the queue")
            assert pool.starting()  # claimed, not running yet
            claimed.set()
            wait_until(lambda: not pool.starting(), message="a running")
            pool.submit("b")
            assert not pool.starting()  # queued, but the one worker is busy
            run_on.set()
            wait_until(pool.starting, message="a ended, b next")
            phases.set()
            wait_until(lambda: not pool.snapshot()[1], message="b taken")
            wait_until(lambda: not pool.snapshot()[0], message="b ended")
            assert not pool.starting()
        finally:
            for event in (claimed, run_on, phases):
                event.set()
            pool.stop()
            assert pool.join(5)


class Gated:
    """Runs that take their conversation (a claim), wait for a slot as the daemon's
    runs do (Pool.wait_turn), then block until their own gate opens."""

    def __init__(self) -> None:
        self.pool: Pool | None = None
        self.gates: dict[str, threading.Event] = {}
        self.taken: list[str] = []
        self.started: list[str] = []
        self.refused: list[str] = []
        self.lock = threading.Lock()

    def run(self, job: Job) -> None:
        assert self.pool is not None
        gate = self.gates.setdefault(job.conv_id, threading.Event())
        with self.lock:
            self.taken.append(job.conv_id)
        if not self.pool.wait_turn(job):
            with self.lock:
                self.refused.append(job.conv_id)
            return
        assert job.phase == "running"
        self.pool.calling(job)  # its first model call, as the daemon's runs say
        with self.lock:
            self.started.append(job.conv_id)
        gate.wait(30)

    def open(self, conv_id: str) -> None:
        self.gates.setdefault(conv_id, threading.Event()).set()

    def phases(self) -> dict[str, str]:
        assert self.pool is not None
        return {job.conv_id: job.phase for job in self.pool.snapshot()[0]}


def gated_pool(size: int, ahead: int, spare: bool) -> tuple[Gated, Pool]:
    runs = Gated()
    pool = Pool(size, runs.run, lambda conv_id: None)
    pool.spare = lambda queued: spare
    pool.resize(size, ahead=ahead)
    runs.pool = pool
    return runs, pool


def test_work_taken_ahead_waits_for_a_slot_and_gets_the_next_one() -> None:
    """With work to spare, the pool takes up to ``ahead`` more than its slots (their
    claims go on beside the runs); a run's end hands its slot to the one that waited
    longest, before its worker takes anything new from the queue."""
    with no_thread_leak():
        runs, pool = gated_pool(2, ahead=2, spare=True)
        try:
            for name in ("a", "b", "c", "d", "e"):
                pool.submit(name)
            wait_until(lambda: len(runs.taken) == 4, message="two runs and two taken ahead")
            wait_until(lambda: sorted(pool.waiting()) == ["c", "d"], message="c, d ready")
            assert sorted(runs.started) == ["a", "b"]
            wait_until(lambda: runs.phases()["c"] == "ready", message="c waiting for a slot")
            assert pool.snapshot()[1] == 1  # e stays queued: two ahead at most
            assert not pool.starting() and pool.full()  # the cycle need not wait for them

            runs.open("a")
            wait_until(lambda: "c" in runs.started, message="a's slot handed to c")
            assert runs.started == ["a", "b", "c"] or runs.started == ["b", "a", "c"]
            wait_until(lambda: "e" in runs.taken, message="e taken ahead in turn")
            assert "e" not in runs.started and "d" not in runs.started
            assert sorted(pool.waiting()) == ["d", "e"]
            for name in ("b", "c", "d", "e"):
                runs.open(name)
            wait_until(lambda: len(runs.started) == 5, message="every run")
            assert sorted(runs.started) == ["a", "b", "c", "d", "e"]
        finally:
            for name in ("a", "b", "c", "d", "e"):
                runs.open(name)
            pool.stop()
            assert pool.join(5)


def test_nothing_is_taken_ahead_without_work_to_spare() -> None:
    """Near the end of the work a conversation taken ahead would wait here while
    another machine could start it: without ``spare``, only the slots take work."""
    with no_thread_leak():
        runs, pool = gated_pool(1, ahead=1, spare=False)
        try:
            for name in ("a", "b"):
                pool.submit(name)
            wait_until(lambda: runs.started == ["a"], message="a running")
            assert pool.snapshot()[1] == 1 and pool.waiting() == set()
            runs.open("a")
            wait_until(lambda: runs.started == ["a", "b"], message="b after a")
        finally:
            for name in ("a", "b"):
                runs.open(name)
            pool.stop()
            assert pool.join(5)


def test_news_of_the_peers_lets_idle_workers_take_work_ahead() -> None:
    """What ``spare`` answers changes with each fetch of the peers' leases, not only at a
    run's end: ``reconsider`` has the idle workers ask again."""
    spare = threading.Event()
    with no_thread_leak():
        runs, pool = gated_pool(1, ahead=1, spare=False)
        pool.spare = lambda queued: spare.is_set()
        try:
            for name in ("a", "b"):
                pool.submit(name)
            wait_until(lambda: runs.started == ["a"], message="a running")
            pool.reconsider()  # nothing changed: b stays queued
            assert pool.snapshot()[1] == 1 and pool.waiting() == set()
            spare.set()
            pool.reconsider()
            wait_until(lambda: pool.waiting() == {"b"}, message="b taken ahead")
            assert runs.started == ["a"]
        finally:
            for name in ("a", "b"):
                runs.open(name)
            pool.stop()
            assert pool.join(5)


def test_work_taken_ahead_waits_for_the_runs_claiming_in_their_slots() -> None:
    """Claims for runs about to start are on their turns' path: nothing is taken ahead
    while a job taken in a slot has not started its run."""
    claimed = threading.Event()
    taken: list[str] = []

    def run(job: Job) -> None:
        taken.append(job.conv_id)
        if job.conv_id == "a":
            claimed.wait(30)  # a's claim in flight
        pool.wait_turn(job)

    with no_thread_leak():
        pool = Pool(1, run, lambda conv_id: None)
        pool.spare = lambda queued: True
        pool.resize(1, ahead=1)
        try:
            pool.submit("a")
            wait_until(lambda: taken == ["a"], message="a taken")
            pool.submit("b")
            assert pool.snapshot()[1] == 1  # b waits: a has not started
            claimed.set()
            wait_until(lambda: "b" in taken, message="b taken once a started")
        finally:
            claimed.set()
            pool.stop()
            assert pool.join(5)


class Launching:
    """Runs that take their conversation, start in a slot, and make their first model
    call only when the test says so (Pool.calling)."""

    def __init__(self) -> None:
        self.pool = Pool(1, self.run, lambda conv_id: None)
        self.pool.spare = lambda queued: True
        self.pool.resize(1, ahead=1)
        self.jobs: dict[str, Job] = {}
        self.taken_at: dict[str, float] = {}
        self.gate = threading.Event()

    def run(self, job: Job) -> None:
        self.taken_at[job.conv_id] = time.monotonic()
        if self.pool.wait_turn(job):
            self.jobs[job.conv_id] = job
            self.gate.wait(30)

    def close(self) -> None:
        self.gate.set()
        self.pool.stop()
        assert self.pool.join(5)


@contextlib.contextmanager
def launching(monkeypatch: pytest.MonkeyPatch, launch_max: float) -> Iterator[Launching]:
    """A pool of one slot and one ahead, given ``a`` then ``b`` (``LAUNCH_MAX`` set)."""
    monkeypatch.setattr(poolmod, "LAUNCH_MAX", launch_max)
    with no_thread_leak():
        runs = Launching()
        try:
            runs.pool.submit("a")
            runs.pool.submit("b")
            yield runs
        finally:
            runs.close()


def test_a_run_is_starting_until_its_first_model_call_is_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run's way to its model call is on its turn's path: until the call is out,
    nothing is taken ahead and the sync cycle waits (Pool.starting); the call lets them
    go at once, long before LAUNCH_MAX."""
    with launching(monkeypatch, 60.0) as runs:
        wait_until(lambda: "a" in runs.jobs, message="a running")
        assert runs.pool.starting()  # its call not out yet
        assert "b" not in runs.taken_at
        runs.pool.calling(runs.jobs["a"])
        wait_until(lambda: "b" in runs.taken_at, message="b taken ahead once a called")
        wait_until(lambda: not runs.pool.starting(), message="nothing starting")


def test_a_run_making_no_model_call_holds_the_claims_ahead_at_most_launch_max(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A resumed run may run tools before its first call: what waits for its start
    waits LAUNCH_MAX from the moment it began to run, no longer."""
    with launching(monkeypatch, 0.4) as runs:
        wait_until(lambda: "b" in runs.taken_at, message="b taken ahead")
        assert runs.taken_at["b"] >= runs.jobs["a"].ran_at + 0.4
        assert not runs.pool.starting()


def test_a_run_waiting_for_a_slot_does_not_start_once_cancelled_or_stopped() -> None:
    """A lease lost meanwhile (Pool.cancel) or the daemon's stop: the conversation
    taken ahead is not run (its lease goes back with nothing done)."""
    with no_thread_leak():
        runs, pool = gated_pool(1, ahead=2, spare=True)
        try:
            for name in ("a", "b", "c"):
                pool.submit(name)
            wait_until(lambda: sorted(pool.waiting()) == ["b", "c"], message="b, c ahead")
            wait_until(lambda: runs.phases().get("b") == "ready", message="b waiting")
            pool.cancel("b")
            wait_until(lambda: runs.refused == ["b"], message="b let go at once")
            wait_until(lambda: runs.phases().get("c") == "ready", message="c waiting")
            pool.stop()
            wait_until(lambda: runs.refused == ["b", "c"], message="c let go by the stop")
            assert runs.started == ["a"]
        finally:
            runs.open("a")
            pool.stop()
            assert pool.join(5)


def test_work_taken_ahead_is_let_go_when_no_slot_frees_in_time() -> None:
    """Runs here that outlast the wait (``hold_max``, a lease in the daemon): the one
    taken ahead is not run, and its conversation is looked at again (``done``)."""
    done: list[str] = []
    with no_thread_leak():
        runs = Gated()
        pool = Pool(1, runs.run, done.append)
        pool.spare = lambda queued: True
        pool.hold_max = 0.3
        pool.resize(1, ahead=1)
        runs.pool = pool
        try:
            pool.submit("a")
            pool.submit("b")
            wait_until(lambda: runs.refused == ["b"], message="b let go after 0.3 s")
            assert runs.started == ["a"]
            wait_until(lambda: done == ["b"], message="b looked at again")
            assert pool.waiting() == set()
        finally:
            runs.open("a")
            pool.stop()
            assert pool.join(5)
