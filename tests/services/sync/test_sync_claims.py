"""Claims at speed, on real clones and a real bare remote: claims pushed together, each
won or lost alone; the fetch after a claim, shared and never waited for behind another;
and a claimed conversation brought up to date only when the remote changed it."""

from __future__ import annotations

import contextlib
import itertools
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from jpfs.core.workspace import open_workspace
from jpfs.errors import GitError
from jpfs.infra.git import refs
from jpfs.infra.git import remote as gitremote
from jpfs.infra.git.remote import PushResult, Update
from jpfs.services.sync import cycling
from jpfs.services.sync.batch import ClaimBatch
from jpfs.services.sync.claiming import LostClaims
from jpfs.services.sync.engine import SyncEngine
from jpfs.services.sync.leases import lease_ref
from jpfs.services.sync.probe import Probes
from tests.conftest import (
    Result,
    clone_sharing,
    daemon_log_tail,
    git,
    held_leases,
    rgit,
    running_daemon,
    share_record,
    wait_until,
)
from tests.messages_server import MessagesServer, last_user_text, text_reply
from tests.services.sync.test_sync_machines import TASK_RE, clone, jpfs, seed_remote, status


def engine_at(path: Path) -> SyncEngine:
    return SyncEngine(open_workspace(path))


def commit_in_record(clone: Path, conv_id: str, name: str, text: str) -> None:
    (clone / "conversations" / conv_id).mkdir(parents=True, exist_ok=True)
    (clone / "conversations" / conv_id / name).write_text(text, encoding="utf-8")
    rgit(clone, "add", "-A")
    rgit(clone, "commit", "-q", "-m", f"{conv_id}: {name}")


def two_clones(
    ws: Path, tmp_path: Path, cli: Callable[..., Result], **keys: str
) -> tuple[Path, Path, SyncEngine, SyncEngine]:
    """The remote, a peer clone, and a sync engine on each clone (``ws``'s first)."""
    remote = share_record(tmp_path, ws, cli, **keys)
    peer = clone_sharing(remote, tmp_path / "peer", cli)
    return remote, peer, engine_at(ws), engine_at(peer)


def run_a_turn(engine: SyncEngine, clone: Path, conv_id: str) -> None:
    """What a daemon does for a turn: claim, commit the result, release with it."""
    assert engine.claim(conv_id)
    commit_in_record(clone, conv_id, "result.md", "done by the peer\n")
    engine.release(conv_id)
    engine.sync_once()


# -- the engine -------------------------------------------------------------------------------


def test_a_claim_after_a_peers_release_brings_its_work_first(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    remote, peer, ours, theirs = two_clones(ws, tmp_path, cli)
    ours.fetch()  # our view: nobody holds "job", and it has no result
    # The peer claims it, runs its turn and gives it back with the work, all since.
    run_a_turn(theirs, peer, "job")
    assert held_leases(remote) == []  # released: a tombstone naming the result's record
    # A claim from our stale view (no lease at all) fails: the tombstone is there.
    assert ours.claim("job") is False
    ours.fetch()
    # Claimed from the tombstone; its record changed "job": merged before acting.
    assert ours.claim("job")
    result = ws / "conversations" / "job" / "result.md"
    assert result.read_text(encoding="utf-8") == "done by the peer\n"
    timings = ours.timings.snapshot()
    assert timings["claim-pull"]["count"] == 1


def test_a_claim_of_a_lease_released_with_work_we_have_asks_nothing_more(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    _remote, peer, ours, theirs = two_clones(ws, tmp_path, cli)
    run_a_turn(theirs, peer, "job")
    ours.sync_once()  # the work is merged here; the lease seen released
    assert ours.claim("job")
    timings = ours.timings.snapshot()
    assert timings["claim-known"]["count"] == 1
    assert "claim-fetch" not in timings and "claim-pull" not in timings


def test_a_claim_does_not_wait_for_news_of_other_conversations(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    _remote, peer, ours, theirs = two_clones(ws, tmp_path, cli, lease="0.6", interval="0.2")
    commit_in_record(peer, "elsewhere", "task.md", "# Not ours to run\n")
    theirs.sync_once()
    # A view older than half a lease: the claim fetches the record once more.
    ours.fetch()
    wait_until(lambda: time.monotonic() - ours.observed_at > ours.claimer.fresh, timeout=5)
    assert ours.claim("job")
    timings = ours.timings.snapshot()
    assert timings["claim-fetch"]["count"] == 1 and "claim-pull" not in timings
    # A fresh view of no lease: nothing more to ask (any release since left a tombstone).
    ours.fetch()
    assert ours.claim("job2")
    timings = ours.timings.snapshot()
    assert timings["claim-known"]["count"] == 1 and timings["claim-fetch"]["count"] == 1
    # Fetched, not merged: the next cycle brings it.
    assert not (ws / "conversations" / "elsewhere").exists()
    ours.release("job")
    ours.release("job2")
    ours.sync_once()
    assert (ws / "conversations" / "elsewhere" / "task.md").exists()


def test_a_claim_lost_to_a_peer_is_not_pushed_again_until_a_fetch_shows_the_lease(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """A conversation whose claim lost is looked at again an interval later (and at
    once if a merge touches it): with no fetch since, its claim was pushed again and
    could only lose again (seen at the end of a bench run, where the machines meet)."""
    _remote, _peer, ours, theirs = two_clones(ws, tmp_path, cli)
    ours.fetch()  # our view: nobody holds "job"
    assert theirs.claim("job")
    assert ours.claim("job") is False  # lost: the remote held their claim

    def pushes() -> int:
        return int(ours.timings.snapshot()["claim-push"]["count"])

    assert pushes() == 1
    assert ours.claimer.unseen() == 1  # a lease our view shows free: a peer holds it
    assert ours.claim("job") is False  # remembered: no push
    assert pushes() == 1 and ours.stats.claims_lost == 2
    assert ours.claimer.unseen() == 1
    assert ours.claim("other")  # the others are claimed as ever
    assert pushes() == 2
    # A fetch shows their lease: still not free, still no push.
    ours.fetch()
    assert ours.claimer.unseen() == 0  # in our view now
    assert ours.claim("job") is False and pushes() == 2
    # Released with its work: ours to take, as any free lease.
    theirs.release("job")
    theirs.sync_once()
    ours.fetch()
    assert ours.claim("job") and pushes() == 3


# -- claims pushed together ---------------------------------------------------------------------


@pytest.fixture
def bare(tmp_path: Path) -> tuple[Path, list[str]]:
    """A clone with commits to push as lease values, and its bare remote."""
    git(tmp_path, "init", "-q", "--bare", "remote.git")
    clone = tmp_path / "clone"
    git(tmp_path, "init", "-q", str(clone))
    git(clone, "remote", "add", "origin", str(tmp_path / "remote.git"))
    oids = []
    for n in range(8):
        git(clone, "commit", "-q", "--allow-empty", "-m", f"lease {n}")
        oids.append(git(clone, "rev-parse", "HEAD").strip())
    return clone, oids


class Pushes:
    """The real push, counted."""

    def __init__(self, clone: Path, remote: str = "origin") -> None:
        self.clone, self.remote, self.sizes = clone, remote, list[int]()

    def __call__(self, updates: Sequence[Update]) -> PushResult:
        self.sizes.append(len(updates))
        return gitremote.push(self.clone, self.remote, updates, atomic=False)


def claim_at_once(batch: ClaimBatch, updates: list[Update]) -> dict[int, object]:
    results: dict[int, object] = {}
    barrier = threading.Barrier(len(updates))

    def claim(index: int) -> None:
        barrier.wait()
        try:
            results[index] = batch.claim(updates[index])
        except GitError as exc:
            results[index] = exc

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(len(updates))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_claims_made_together_go_in_one_push_each_won_alone(bare: tuple[Path, list[str]]) -> None:
    clone, oids = bare
    remote = clone.parent / "remote.git"
    git(clone, "push", "-q", "origin", f"{oids[7]}:refs/jpfs/leases/held")
    pushes = Pushes(clone)
    batch = ClaimBatch(pushes, gather=1.0)  # a long gather: the burst surely lands in it
    updates = [Update(f"refs/jpfs/leases/c{n}", oids[n], None) for n in range(4)]
    updates.append(Update("refs/jpfs/leases/held", oids[4], None))  # expects it free: it is not
    results = claim_at_once(batch, updates)
    assert results == {0: True, 1: True, 2: True, 3: True, 4: False}
    assert pushes.sizes == [5]
    listed = git(remote, "for-each-ref", "--format=%(refname) %(objectname)", "refs/jpfs/leases/")
    assert sorted(listed.split("\n")[:-1]) == sorted(
        [f"refs/jpfs/leases/c{n} {oids[n]}" for n in range(4)]
        + [f"refs/jpfs/leases/held {oids[7]}"]
    )


def test_one_conversation_claimed_twice_at_once_is_won_once(bare: tuple[Path, list[str]]) -> None:
    clone, oids = bare
    batch = ClaimBatch(Pushes(clone), gather=1.0)
    updates = [Update("refs/jpfs/leases/same", oids[n], None) for n in range(2)]
    assert sorted(claim_at_once(batch, updates).values()) == [False, True]  # type: ignore[type-var]


def test_a_claim_made_while_a_push_flies_need_not_wait_for_it(bare: tuple[Path, list[str]]) -> None:
    clone, oids = bare
    flying, release = threading.Event(), threading.Event()
    pushes = Pushes(clone)

    def held_push(updates: Sequence[Update]) -> PushResult:
        if not flying.is_set():
            flying.set()
            assert release.wait(30), "the second claim never got through"
        return pushes(updates)

    batch = ClaimBatch(held_push, gather=0.0)
    first: dict[str, bool] = {}
    thread = threading.Thread(target=lambda: first.setdefault("won", batch.claim(
        Update("refs/jpfs/leases/a", oids[0], None))))  # fmt: skip
    thread.start()
    assert flying.wait(30)
    try:
        # The first push is still in the air: this one flies beside it.
        assert batch.claim(Update("refs/jpfs/leases/b", oids[1], None)) is True
    finally:
        release.set()
        thread.join()
    assert first == {"won": True} and pushes.sizes == [1, 1]


def test_a_push_that_fails_fails_every_claim_in_it(bare: tuple[Path, list[str]]) -> None:
    clone, oids = bare
    batch = ClaimBatch(Pushes(clone, remote=str(clone.parent / "missing.git")), gather=1.0)
    updates = [Update(f"refs/jpfs/leases/c{n}", oids[n], None) for n in range(3)]
    results = claim_at_once(batch, updates)
    assert all(isinstance(outcome, GitError) for outcome in results.values()), results


# -- the fetch after a claim ---------------------------------------------------------------------


class Counted:
    def __init__(self) -> None:
        self.count = 0

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        self.count += 1
        yield


def test_a_fetch_serves_the_claims_made_before_it_began(bare: tuple[Path, list[str]]) -> None:
    clone, oids = bare
    counted = Counted()
    probes = Probes(clone, "origin", "record", "refs/jpfs/sync/origin/claimed-", counted)
    assert probes.tip_since(0.0) is None  # no record on the remote yet
    git(clone, "push", "-q", "origin", f"{oids[0]}:refs/heads/record")
    claimed = time.monotonic()
    assert probes.tip_since(claimed) == oids[0]
    assert probes.tip_since(claimed) == oids[0]  # begun after this claim: shared
    assert counted.count == 2
    git(clone, "push", "-q", "origin", f"{oids[1]}:refs/heads/record")
    assert probes.tip_since(time.monotonic()) == oids[1]  # a later claim: a fetch of its own
    assert counted.count == 3


# -- in process, as git says ----------------------------------------------------------------


def test_changed_since_fork_agrees_with_git(bare: tuple[Path, list[str]]) -> None:
    clone, _ = bare
    git(clone, "checkout", "-q", "-b", "base")
    for name in ("a/x", "b/y"):
        (clone / name).parent.mkdir(exist_ok=True)
        (clone / name).write_text(f"{name}\n", encoding="utf-8")
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "base")
    git(clone, "checkout", "-q", "-b", "ours")
    (clone / "a" / "x").write_text("ours\n", encoding="utf-8")
    git(clone, "commit", "-q", "-am", "ours changes a")
    for branch, change in [
        ("theirs-a", ("a/x", "theirs\n")),
        ("theirs-b", ("b/y", "theirs\n")),
        ("theirs-new", ("c/z", "new\n")),
        ("theirs-gone", ("b/y", None)),
    ]:
        git(clone, "checkout", "-q", "-b", branch, "base")
        path, text = change
        if text is None:
            git(clone, "rm", "-q", path)
        else:
            (clone / path).parent.mkdir(exist_ok=True)
            (clone / path).write_text(text, encoding="utf-8")
            git(clone, "add", "-A")
        git(clone, "commit", "-q", "-m", branch)
    git(clone, "checkout", "-q", "-b", "ahead", "ours")
    (clone / "b" / "y").write_text("ahead\n", encoding="utf-8")
    git(clone, "commit", "-q", "-am", "ahead of ours")
    ours = git(clone, "rev-parse", "ours").strip()
    for branch in ("base", "ours", "theirs-a", "theirs-b", "theirs-new", "theirs-gone", "ahead"):
        theirs = git(clone, "rev-parse", branch).strip()
        base = git(clone, "merge-base", ours, theirs).strip()
        for path in ("a", "b", "c", "a/x"):
            said = subprocess.run(
                ["git", "diff", "--quiet", base, theirs, "--", path], cwd=clone, check=False
            )
            changed = said.returncode != 0
            assert refs.changed_since_fork(clone, ours, theirs, path) is changed, (branch, path)


def test_messages_under_agrees_with_for_each_ref(bare: tuple[Path, list[str]]) -> None:
    clone, oids = bare
    git(clone, "update-ref", "refs/jpfs/x/one", oids[0])
    git(clone, "update-ref", "refs/jpfs/x/two", oids[1])
    empty_tree = git(clone, "hash-object", "-t", "tree", "-w", "/dev/null").strip()
    git(clone, "update-ref", "refs/jpfs/x/tree", empty_tree)  # junk where a lease goes
    git(clone, "update-ref", "refs/jpfs/y/other", oids[2])
    listed = git(clone, "for-each-ref", "--format=%(refname) %(objectname)", "refs/jpfs/x/")
    expected = dict(line.split(" ") for line in listed.splitlines())
    found = refs.messages_under(clone, "refs/jpfs/x/")
    assert {ref: oid for ref, (oid, _) in found.items()} == expected
    assert found["refs/jpfs/x/one"][1] == "lease 0\n" and found["refs/jpfs/x/tree"][1] == ""
    git(clone, "update-ref", "refs/jpfs/z/third", oids[2])
    listed = git(
        clone, "for-each-ref", "--format=%(refname) %(objectname)", "refs/jpfs/x/", "refs/jpfs/z/"
    )
    both = refs.messages_under(clone, "refs/jpfs/x/", "refs/jpfs/z/")  # one pass, two prefixes
    assert {ref: oid for ref, (oid, _) in both.items()} == dict(
        line.split(" ") for line in listed.splitlines()
    )


# -- the daemon -----------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_a_task_a_merge_brings_runs_without_waiting_to_settle(
    tmp_path: Path, api_env: MessagesServer
) -> None:
    """Files git wrote from a peer's record are the record's: the settle that waits for a
    human to finish saving does not apply to them (a human edit still waits for it)."""
    api_env.responder = lambda request: text_reply("Done.")  # type: ignore[assignment]
    remote = seed_remote(tmp_path, lease=8.0)
    daemon, writer = clone(remote, tmp_path / "d1"), clone(remote, tmp_path / "writer")
    jpfs(daemon, "config", "set", "daemon.settle", "120")  # local: far longer than the test
    with running_daemon(daemon):
        (writer / "conversations" / "t-000").mkdir(parents=True)
        task = writer / "conversations" / "t-000" / "task.md"
        task.write_text("# Task 0\n\nSay hello.\n", encoding="utf-8")
        jpfs(writer, "sync")
        wait_until(
            lambda: (daemon / "conversations" / "t-000" / "result.md").exists(),
            timeout=60,
            message="the merged task's turn, long before daemon.settle",
        )
    assert next(last_user_text(r.json or {}) for r in api_env.requests).startswith("# Task 0")


@pytest.mark.timeout(300)
def test_a_daemon_claims_its_next_conversation_while_its_run_goes_on(
    tmp_path: Path, api_env: MessagesServer
) -> None:
    """While a peer at work keeps the free work it wants, a daemon claims its next
    conversation while its run goes on, and starts it the moment the run ends; near the
    end of the work, the last free one is left to the peer (it holds one lease of the two
    a machine of one worker runs and claims ahead)."""
    gates = {n: threading.Event() for n in range(5)}

    def respond(request: dict[str, object]) -> object:
        match = TASK_RE.search(last_user_text(request))
        assert match is not None
        gates[int(match.group(1))].wait(60)  # the model answers when the test says
        return text_reply("Done.")

    api_env.responder = respond  # type: ignore[assignment]
    remote = seed_remote(tmp_path, lease=30.0)  # what is claimed ahead is held a lease at most
    daemon, writer = clone(remote, tmp_path / "d1"), clone(remote, tmp_path / "writer")
    jpfs(daemon, "config", "set", "daemon.max_agents", "1")  # local: one run at a time
    peer_clone = clone(remote, tmp_path / "peer")
    jpfs(peer_clone, "sync")
    jpfs(peer_clone, "config", "set", "sync.machine", "peer")
    peer = SyncEngine(open_workspace(peer_clone))
    assert peer.claim("t-004")  # a peer at work, before the task is even sent

    def asked() -> list[int]:
        found = (TASK_RE.search(last_user_text(r.json or {})) for r in api_env.requests)
        return [int(m.group(1)) for m in found if m is not None]

    def shown() -> tuple[list[str], list[str]]:
        info = status(daemon)
        running = [str(a["id"]) for a in info.get("agents", [])]  # type: ignore[attr-defined]
        ahead = [str(c) for c in info.get("claimed_ahead", [])]  # type: ignore[attr-defined]
        return running, ahead

    def wait(predicate: Callable[[], object], message: str, timeout: float = 30) -> None:
        """``wait_until``, and if it times out, what the daemon showed and logged."""
        try:
            wait_until(predicate, timeout=timeout, message=message)
        except AssertionError as exc:
            where = f"asked {asked()}; leases {held_leases(remote)}; status {status(daemon)}"
            said = daemon_log_tail(daemon, 40)
            raise AssertionError(f"{exc}\n{where}\nthe daemon's log:\n{said}") from None

    try:
        with running_daemon(daemon):
            for n in range(5):
                (writer / "conversations" / f"t-{n:03d}").mkdir(parents=True)
                task = writer / "conversations" / f"t-{n:03d}" / "task.md"
                task.write_text(f"# Task {n}\n\nSay hello.\n", encoding="utf-8")
            jpfs(writer, "sync")
            # One run, one claimed ahead: three free, two wanted (that one, and the
            # peer's second).
            wait(lambda: len(asked()) == 1, "the first run", timeout=60)
            wait(lambda: len(shown()[1]) == 1, "a claim ahead")
            running, ahead = shown()
            assert len(running) == 1 and ahead[0] not in running
            assert len(held_leases(remote)) == 3  # the run's, the one ahead, the peer's
            shown_text = jpfs(daemon, "daemon", "status")
            assert "agents: 1 of 1 running, 1 claimed ahead" in shown_text
            first = asked()[0]

            gates[first].set()
            wait(lambda: len(asked()) == 2, "the next run")
            assert f"t-{asked()[1]:03d}" == ahead[0]  # the one claimed ahead ran next
            # Two free at that pop, two wanted: one more ahead.
            wait(
                lambda: (now := shown()[1]) != [] and now[0] != ahead[0],
                "the third claimed ahead",
            )
            gates[asked()[1]].set()
            wait(lambda: len(asked()) == 3, "the third run")
            # One left free, two wanted: the peer's; it waits here for a run slot.
            wait(lambda: shown()[1] == [], "the last one not claimed ahead")
            wait(lambda: len(held_leases(remote)) == 2, "the third run's, the peer's")
            gates[asked()[2]].set()
            wait(lambda: len(asked()) == 4, "the last free one's run")
            gates[asked()[3]].set()
            wait(
                lambda: len(list((daemon / "conversations").glob("t-*/result.md"))) == 4,
                "every result but the peer's",
                timeout=60,
            )
    finally:
        for gate in gates.values():
            gate.set()
        peer.claimer.give_back("t-004")
        peer.close()
    assert sorted(asked()) == [0, 1, 2, 3]  # each turn once; the peer's was never run here


def test_a_lost_claim_is_remembered_until_a_fetch_begun_after_it() -> None:
    lost = LostClaims()
    lost.add("refs/jpfs/leases/a", when=5.0, view=1.0)
    assert lost.lost_since("refs/jpfs/leases/a", 4.0) and lost.since(4.0) == 1
    assert not lost.lost_since("refs/jpfs/leases/b", 4.0)
    # A fetch begun after it shows the lease: forgotten.
    assert not lost.lost_since("refs/jpfs/leases/a", 6.0)
    assert lost.since(0.0) == 0


def test_lost_claims_are_counted_while_other_claims_add_to_them() -> None:
    """The pool counts them (``Claimer.unseen``, under its own lock) while its workers'
    claims add to them: counting over a dict another thread grows raised "dictionary
    changed size during iteration" (hundreds of times in 20,000 counts, measured)."""
    lost = LostClaims()
    done = threading.Event()
    errors: list[BaseException] = []

    def claims() -> None:
        try:
            for i in itertools.count():
                if done.is_set():
                    return
                lost.add(f"refs/jpfs/leases/t-{i}", when=float(i), view=float(i - 200))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # hand the interpreter over as often as it can
    writer = threading.Thread(target=claims)
    writer.start()
    try:
        for _ in range(5000):
            lost.since(100.0)
            lost.lost_since("refs/jpfs/leases/t-150", 100.0)
    finally:
        done.set()
        writer.join(10)
        sys.setswitchinterval(interval)
    assert not writer.is_alive() and errors == []


@contextlib.contextmanager
def cycling_asking(
    engine: SyncEngine, starting: Callable[[], bool], full: Callable[[], bool] | None = None
) -> Iterator[None]:
    """The engine's sync thread as a daemon runs it, with ``starting`` and ``full`` for
    its Pool's. Stopped, and checked stopped, on leaving."""
    stop = threading.Event()
    thread = threading.Thread(target=cycling.run, args=(engine, stop, starting, full))
    thread.start()
    try:
        yield
    finally:
        stop.set()  # a wait for runs starting ends on it too
        engine.wake.set()
        thread.join(60)
    assert not thread.is_alive()


def test_a_cycle_woken_by_a_runs_end_pushes_after_the_runs_starting_next(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """The result's push waits while the daemon starts its next runs (their claims are
    on the path of the next turns); then it goes, with the release of the lease."""
    remote, _, ours, _ = two_clones(ws, tmp_path, cli, interval="10")
    record = "refs/heads/jpfs-record"
    before = refs.resolve(remote, record)
    claiming = threading.Event()
    seen: list[str | None] = []

    def starting() -> bool:
        seen.append(refs.resolve(remote, record))
        return claiming.is_set()

    with cycling_asking(ours, starting):
        wait_until(lambda: ours.stats.fetches >= 1, message="the first cycle's fetch")
        claiming.set()
        assert ours.claim("done")
        commit_in_record(ws, "done", "result.md", "done\n")
        ours.release("done")  # a run's end: wakes the cycle
        wait_until(lambda: seen.count(before) >= 4, message="the woken cycle asking")
        claiming.clear()  # the next runs are under way
        wait_until(lambda: refs.resolve(remote, record) != before, message="the result pushed")
    assert held_leases(remote) == []  # released with the result


def test_a_cycle_whose_time_came_waits_for_the_runs_starting_too(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """Not only a run's end: no fetch of the peers' news beside this daemon's claims."""
    _, _, ours, _ = two_clones(ws, tmp_path, cli, interval="1")
    claiming = threading.Event()
    fetched: list[int] = []

    def starting() -> bool:
        if claiming.is_set():
            fetched.append(ours.stats.fetches)
        return claiming.is_set()

    claiming.set()
    with cycling_asking(ours, starting):
        wait_until(lambda: len(fetched) >= 4, message="the first cycle asking")
        claiming.clear()
        wait_until(lambda: ours.stats.fetches > fetched[0], message="the cycle's fetch")
    assert set(fetched) == {0}  # asked before its fetch, none made while runs started


def test_a_lease_due_for_renewal_does_not_wait_for_runs_starting(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    remote, _, ours, _ = two_clones(ws, tmp_path, cli, interval="1", lease="3")
    assert ours.claim("job")
    ref = lease_ref("job")
    claimed = refs.resolve(remote, ref)
    wait_until(
        lambda: ours.book.urgent(time.monotonic() + ours.interval),
        message="the lease half its duration old within an interval",
    )
    asked: list[str | None] = []

    def starting() -> bool:  # runs starting for ever
        asked.append(refs.resolve(remote, ref))
        return True

    with cycling_asking(ours, starting):
        wait_until(lambda: refs.resolve(remote, ref) != claimed, message="the renewal")
    assert claimed not in asked  # renewed without waiting


def test_a_daemon_whose_workers_all_run_fetches_every_other_cycle_and_still_renews(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """No news could start a run while every worker runs one: a cycle then fetches only
    if the last fetch began two intervals ago, and pushes all the same."""
    remote, _, ours, _ = two_clones(ws, tmp_path, cli, interval="1", lease="12")
    assert ours.claim("job")
    ref = lease_ref("job")
    claimed = refs.resolve(remote, ref)
    at_start: list[int] = []  # the fetches made before each cycle (asked as it starts)

    def starting() -> bool:
        at_start.append(ours.stats.fetches)
        return False

    with cycling_asking(ours, starting, full=lambda: True):
        wait_until(lambda: refs.resolve(remote, ref) != claimed, timeout=30, message="a renewal")
        wait_until(lambda: len(at_start) >= 6, timeout=30, message="six cycles")
    fetched = [b - a for a, b in itertools.pairwise(at_start)]
    assert 0 in fetched and 1 in fetched, at_start  # some cycles fetch, some do not
    assert ours.stats.forfeits == 0 and ours.book.holds("job")


def test_the_wait_for_runs_starting_is_bounded_and_ends_on_stop() -> None:
    stop = threading.Event()
    began = time.monotonic()
    cycling.wait_started(lambda: True, stop, 0.05)
    assert time.monotonic() - began >= 0.05
    stop.set()
    cycling.wait_started(lambda: True, stop, 3600.0)  # returns at once


def test_a_runs_end_waits_for_the_runs_that_started_before_it_to_end_too(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """One push for the results of runs that started together: the cycle a run's end
    woke waits while a lease held since before it is not given back, within a bound,
    and not for a run that started after it."""
    _, _, ours, _ = two_clones(ws, tmp_path, cli, interval="1", lease="30")
    assert ours.claim("a") and ours.claim("b")
    stop = threading.Event()
    ours.release("a")
    woke = time.monotonic()
    cycling.wait_released(ours.book, stop, woke, 0.2)  # "b" still runs: the whole bound
    assert time.monotonic() - woke >= 0.2
    ours.release("b")
    assert ours.claim("next")  # a run started after the wake is not waited for
    began = time.monotonic()
    cycling.wait_released(ours.book, stop, woke, 3600.0)
    assert time.monotonic() - began < 60  # returned when "a" and "b" were both done
    stop.set()
    began = time.monotonic()
    cycling.wait_released(ours.book, stop, began + 1, 3600.0)  # "next" runs: ends on stop
    assert time.monotonic() - began < 60


def test_a_runs_end_does_not_wait_for_conversations_claimed_ahead(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """A conversation claimed ahead of a run slot holds its lease from before the wake
    but has no run under way to end: the cycle does not wait for it."""
    _, _, ours, _ = two_clones(ws, tmp_path, cli, interval="1", lease="30")
    assert ours.claim("a") and ours.claim("ahead")
    stop = threading.Event()
    ours.release("a")
    woke = time.monotonic()
    cycling.wait_released(ours.book, stop, woke, 20.0, waiting={"ahead"})
    assert time.monotonic() - woke < 20  # not the bound: "ahead" runs nothing yet
    assert ours.book.holds("ahead")


def test_released_leases_are_swept_once_old(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    remote, _peer, ours, theirs = two_clones(ws, tmp_path, cli, lease="0.6", interval="0.2")
    assert ours.upkeep.age == 60.0  # 2 x sync.lease, and at least a minute
    ours.upkeep.age = 1.2  # here, not to wait a minute
    assert theirs.claim("job")
    theirs.release("job")
    theirs.sync_once()
    listed = git(remote, "for-each-ref", "--format=%(refname)", "refs/jpfs/leases/").split()
    assert listed and held_leases(remote) == []  # released: there, as a tombstone
    ours.fetch()
    ours.sweep()
    assert git(remote, "for-each-ref", "refs/jpfs/leases/") != ""  # too young to go

    def swept() -> bool:
        ours.fetch()
        ours.sweep()
        return git(remote, "for-each-ref", "refs/jpfs/leases/") == ""

    wait_until(swept, timeout=20, interval=0.1, message="the tombstone swept")


def test_machines_sharing_work_each_pick_a_different_share_first(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    share_record(tmp_path, ws, cli)
    engine = engine_at(ws)
    machines = ["desk", "laptop", "ci-runner"]
    picks: dict[str, set[str]] = {}
    for machine in machines:
        engine.machine = machine
        # The others hold leases, as this machine's last fetch saw.
        engine.stats.working = {other for other in machines if other != machine}
        picks[machine] = {
            f"t-{n:04d}" for n in range(3000) if engine.claimer.rank(f"t-{n:04d}") == 0
        }
    assert set.union(*picks.values()) == {f"t-{n:04d}" for n in range(3000)}
    assert sum(len(share) for share in picks.values()) == 3000  # each picked first once
    assert all(800 < len(share) < 1200 for share in picks.values()), picks.keys()
    # Past its own share, each machine stands at a place of its own: two that ran out
    # never reach for the same conversation next.
    places: dict[str, list[int]] = {}
    for machine in machines:
        engine.machine = machine
        engine.stats.working = {other for other in machines if other != machine}
        places[machine] = [engine.claimer.rank(f"t-{n:04d}") for n in range(3000)]
    for n in range(3000):
        assert sorted(places[machine][n] for machine in machines) == [0, 1, 2]
    # Out of its own, a machine takes first what their owner queued last: each queues new
    # work in the order of its own score (Claimer.order), which every machine can compute.
    engine.machine = "laptop"
    theirs = sorted((f"t-{n:04d}" for n in range(100)), key=engine.claimer.order)
    engine.machine, engine.stats.working = "desk", {"laptop"}
    theirs = [conv_id for conv_id in theirs if engine.claimer.rank(conv_id) == 1]
    assert len(theirs) > 20 and min(theirs, key=engine.claimer.pick) == theirs[-1]
    engine.stats.working = set()
    engine.machine = "desk"
    assert all(engine.claimer.rank(f"t-{n:04d}") == 0 for n in range(100))  # alone: all


def test_a_machine_between_two_runs_keeps_its_share(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """Who ranks first for what counts the machines that released a lease lately too: a
    peer that just pushed its results and holds nothing until its next claim must not
    drop out of everyone's ranking (their shares would move, and claims collide)."""
    remote = share_record(tmp_path, ws, cli)
    other = clone_sharing(remote, tmp_path / "other", cli)
    assert cli("config", "set", "sync.machine", "laptop", cwd=other).code == 0
    ours, theirs = engine_at(ws), engine_at(other)
    for engine in (ours, theirs):
        engine.sync_once()
    assert theirs.claim("job")
    theirs.sync_once()
    ours.fetch()
    assert ours.stats.peers == {"laptop": 1} and ours.stats.working == {"laptop"}
    theirs.release("job")
    theirs.sync_once()
    ours.fetch()
    assert ours.stats.peers == {} and ours.stats.working == {"laptop"}
    ranks = [ours.claimer.rank(f"t-{n:04d}") for n in range(200)]
    assert 60 < ranks.count(0) < 140 and set(ranks) == {0, 1}
