"""The parts of sharing a record through a remote, one at a time, on real clones:
``jpfs sync``, merges that keep both sides of a conflict, and leases claimed by
compare-and-swap, expired, taken over and forfeited."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jpfs.core.workspace import open_workspace
from jpfs.errors import Contended, GitError
from jpfs.services.sync import cycling
from jpfs.services.sync.engine import SyncEngine
from jpfs.services.sync.leases import lease_ref
from tests.conftest import (
    Result,
    clone_sharing,
    git,
    held_leases,
    rgit,
    running_daemon,
    share_record,
    use_only_agent,
    wait_until,
)
from tests.messages_server import MessagesServer, text_reply


def test_sync_needs_a_remote_and_names_the_fix(ws: Path, cli: Callable[..., Result]) -> None:
    off = cli("sync")
    assert off.code == 1
    assert "sync.remote is not set" in off.stderr and "jpfs config set sync.remote" in off.stderr
    assert cli("config", "set", "sync.remote", "nowhere").code == 0
    missing = cli("sync")
    assert missing.code == 1
    assert "no such remote" in missing.stderr and "git remote add nowhere" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_sync_carries_a_task_written_on_one_clone_to_another(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    remote = share_record(tmp_path, ws, cli)
    laptop = clone_sharing(remote, tmp_path / "laptop", cli)
    (laptop / "conversations" / "hello").mkdir()
    (laptop / "conversations" / "hello" / "task.md").write_text("# Hi\n", encoding="utf-8")
    sent = cli("sync", "--format", "json", cwd=laptop)
    assert sent.code == 0, sent.stderr
    assert '"committed": "' in sent.stdout
    assert "Jpfs-Machine: " in rgit(laptop, "log", "-1", "--format=%B")
    got = cli("sync")
    assert got.code == 0 and "fast-forward" in got.stderr
    assert (ws / "conversations" / "hello" / "task.md").read_text(encoding="utf-8") == "# Hi\n"
    # Which machine made the change is in the history, for people and for programs.
    history = cli("log", "hello")
    assert history.code == 0 and " on " in history.stdout, history.stdout
    machine = rgit(laptop, "log", "-1", "--format=%(trailers:key=Jpfs-Machine,valueonly)").strip()
    assert machine and f"on {machine}" in history.stdout
    # The user's branch and index were never touched by either sync.
    assert git(ws, "status", "--porcelain") == ""
    assert git(laptop, "status", "--porcelain") == ""


def test_a_file_changed_on_both_clones_keeps_both_versions(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    remote = share_record(tmp_path, ws, cli, machine="desk")
    laptop = clone_sharing(remote, tmp_path / "laptop", cli)
    assert cli("config", "set", "sync.machine", "laptop", cwd=laptop).code == 0
    conv = "conversations/notes"
    for clone_ in (ws, laptop):
        (clone_ / conv).mkdir(exist_ok=True)
    (ws / conv / "task.md").write_text("# From the desk\n", encoding="utf-8")
    (laptop / conv / "task.md").write_text("# From the laptop\n", encoding="utf-8")
    (ws / "conversations" / "other").mkdir()
    (ws / "conversations" / "other" / "task.md").write_text("# Other\n", encoding="utf-8")
    assert cli("sync").code == 0
    merged = cli("sync", cwd=laptop)
    assert merged.code == 0, merged.stderr
    assert "conflict: both sides changed notes/task.md; theirs is notes/task.md.conflict-desk" in (
        merged.stderr
    )
    assert (laptop / conv / "task.md").read_text(encoding="utf-8") == "# From the laptop\n"
    copy = laptop / conv / "task.md.conflict-desk"
    assert copy.read_text(encoding="utf-8") == "# From the desk\n"
    assert (laptop / "conversations" / "other" / "task.md").is_file()  # the clean part merged
    assert "Jpfs-Conflict: notes/task.md.conflict-desk" in rgit(laptop, "log", "-1", "--format=%B")
    assert rgit(laptop, "status", "--porcelain") == ""
    assert cli("sync").code == 0  # and the desk gets the same state
    assert (ws / conv / "task.md.conflict-desk").is_file()
    assert rgit(ws, "rev-parse", "HEAD") == rgit(laptop, "rev-parse", "HEAD")


def engine_at(path: Path) -> SyncEngine:
    return SyncEngine(open_workspace(path))


def write_task(clone_: Path, conv: str, text: str) -> None:
    (clone_ / "conversations" / conv).mkdir(parents=True, exist_ok=True)
    (clone_ / "conversations" / conv / "task.md").write_text(text, encoding="utf-8")
    open_workspace(clone_).committer.commit_pending()


def test_work_to_send_is_pushed_before_any_fetch_and_a_lost_push_merges(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    remote = share_record(tmp_path, ws, cli)
    laptop = clone_sharing(remote, tmp_path / "laptop", cli)
    ours, theirs = engine_at(ws), engine_at(laptop)
    ours.sync_once()
    write_task(ws, "first", "# First\n")
    fetches = ours.stats.fetches
    ours.sync_once(eager=True, observe=False)
    assert ours.stats.fetches == fetches  # ours only added to theirs: no round trip first
    assert git(remote, "rev-parse", "jpfs-record") == rgit(ws, "rev-parse", "HEAD")
    # A peer pushed meanwhile: the eager push loses, fetches, merges and pushes again.
    write_task(laptop, "second", "# Second\n")
    theirs.sync_once()
    write_task(ws, "third", "# Third\n")
    ours.sync_once(eager=True, observe=False)
    assert ours.stats.fetches == fetches + 1
    listed = git(remote, "ls-tree", "--name-only", "jpfs-record").split()
    assert {"first", "second", "third"} <= set(listed)
    assert git(remote, "rev-parse", "jpfs-record") == rgit(ws, "rev-parse", "HEAD")
    # With a view to keep (a daemon's claims read it), an old view is fetched after.
    ours.observed_at = time.monotonic() - 2 * ours.interval
    write_task(ws, "fourth", "# Fourth\n")
    ours.sync_once(eager=True)
    assert ours.stats.fetches == fetches + 2
    assert git(remote, "rev-parse", "jpfs-record") == rgit(ws, "rev-parse", "HEAD")


def test_a_fresh_clone_sends_by_hand_from_what_git_fetched(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """A clone that never ran ``jpfs sync`` compares against what ``git clone`` saw of
    the record; the remote moved since: the push loses, and the work still lands."""
    remote = share_record(tmp_path, ws, cli)
    git(tmp_path, "clone", "-q", str(remote), str(tmp_path / "fresh"))
    fresh = tmp_path / "fresh"
    write_task(ws, "meanwhile", "# Meanwhile\n")
    assert cli("sync").code == 0
    (fresh / "conversations" / "hello").mkdir(parents=True)  # as before any jpfs command
    (fresh / "conversations" / "hello" / "task.md").write_text("# Hi\n", encoding="utf-8")
    sent = cli("sync", cwd=fresh)
    assert sent.code == 0, sent.stderr
    listed = git(remote, "ls-tree", "--name-only", "jpfs-record").split()
    assert {"hello", "meanwhile"} <= set(listed)


def test_of_two_claims_at_once_exactly_one_wins(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    remote = share_record(tmp_path, ws, cli)
    other = clone_sharing(remote, tmp_path / "other", cli)
    engines = [engine_at(ws), engine_at(other)]
    for engine in engines:
        engine.sync_once()
    results: dict[int, bool] = {}
    barrier = threading.Barrier(2)

    def claim(index: int) -> None:
        barrier.wait()
        results[index] = engines[index].claim("job")

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results.values()) == [False, True]
    winner, loser = (engines[0], engines[1]) if results[0] else (engines[1], engines[0])
    assert git(remote, "for-each-ref", "--format=%(refname)", "refs/jpfs/leases/").split() == [
        lease_ref("job")
    ]
    # A claim seen held is refused without asking the remote; released, it is free again.
    loser.fetch()
    assert loser.claim("job") is False
    winner.release("job")
    winner.sync_once()
    assert held_leases(remote) == []
    loser.fetch()
    assert loser.claim("job") is True


def test_an_expired_lease_is_taken_over_and_the_late_work_is_forfeit(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    remote = share_record(tmp_path, ws, cli, lease="0.5", interval="0.1")
    other = clone_sharing(remote, tmp_path / "other", cli)
    slow, fast = engine_at(ws), engine_at(other)
    conv = "work"
    (ws / "conversations" / conv).mkdir()
    (ws / "conversations" / conv / "task.md").write_text("# Work\n", encoding="utf-8")
    assert cli("sync").code == 0
    assert slow.claim(conv)
    # The holder stalls (a partition): it writes a turn but cannot renew or push.
    result = ws / "conversations" / conv / "result.md"
    result.write_text("late turn\n", encoding="utf-8")
    rgit(ws, "add", "-A")
    rgit(ws, "commit", "-q", "-m", "late turn")

    fast.fetch()
    assert fast.claim(conv) is False  # held, and not expired yet
    wait_until(lambda: fast.fetch() is not None and fast.claim(conv), timeout=10, interval=0.1)
    assert fast.stats.takeovers == 1
    (other / "conversations" / conv / "result.md").write_text("the turn\n", encoding="utf-8")
    rgit(other, "add", "-A")
    rgit(other, "commit", "-q", "-m", "the turn")
    fast.release(conv)
    fast.sync_once()

    # And files of that conversation not committed yet (a run cut short, a human):
    result.write_text("later still\n", encoding="utf-8")
    (ws / "conversations" / conv / "notes.md").write_text("mine\n", encoding="utf-8")
    lost: list[str] = []
    slow.on_lost = lost.append
    slow.sync_once()  # its push fails as a whole: the lease is not its own any more
    assert lost == [conv] and slow.stats.forfeits == 1
    assert result.read_text(encoding="utf-8") == "the turn\n"
    tip = git(remote, "show", "jpfs-record:work/result.md")
    assert tip == "the turn\n"
    assert "Jpfs-Forfeit: work/" in rgit(ws, "log", "-1", "--format=%B")
    assert rgit(ws, "status", "--porcelain") == ""
    # Both sides wrote result.md: the remote's is the one, no copy of ours kept beside.
    assert "conflict" not in rgit(ws, "ls-tree", "-r", "--name-only", "HEAD")
    assert "Jpfs-Conflict" not in rgit(ws, "log", "-1", "--format=%B")
    # Dropped from the record, never from the disk: saved aside, and said in the log.
    (saved,) = (ws / ".jpfs" / "local" / "forfeited").iterdir()
    assert (saved / conv / "result.md").read_text(encoding="utf-8") == "later still\n"
    assert (saved / conv / "notes.md").read_text(encoding="utf-8") == "mine\n"
    assert not (ws / "conversations" / conv / "notes.md").exists()


def test_a_peers_files_a_merge_left_ahead_of_the_branch_are_no_human_edit(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """A merge writes a peer's files into the record worktree before it moves the branch;
    while its branch update keeps losing (a hook aborts it, as a compare-and-swap lost to
    ever newer local commits is), they sit there ahead of the branch. The daemon must
    not take them for a human's edit: a human's edit made meanwhile is committed, the
    peer's files come in with the merge once it lands, and no edit commit carries them."""
    remote = share_record(tmp_path, ws, cli, interval="0.3", lease="3", machine="desk")
    laptop = clone_sharing(remote, tmp_path / "laptop", cli)
    assert cli("config", "set", "sync.machine", "laptop", cwd=laptop).code == 0
    marker = tmp_path / "let-merges-land"
    abort_record_updates(ws, marker)
    theirs = ws / "conversations" / "shared" / "notes.md"
    with running_daemon(ws):
        (laptop / "conversations" / "shared").mkdir()
        (laptop / "conversations" / "shared" / "notes.md").write_text("theirs\n", encoding="utf-8")
        assert cli("sync", cwd=laptop).code == 0
        wait_until(theirs.exists, timeout=30, message="the peer's file in the worktree")
        assert "shared/notes.md" not in rgit(ws, "ls-tree", "-r", "--name-only", "HEAD")
        # A human edit after it: once that is committed, the daemon has looked at the
        # peer's file too, a settle after it appeared.
        (ws / "conversations" / "mine").mkdir()
        (ws / "conversations" / "mine" / "notes.md").write_text("mine\n", encoding="utf-8")
        wait_until(
            lambda: rgit(ws, "log", "--format=%H", "-1", "--", "mine/notes.md") != "",
            timeout=30,
            message="the human edit committed",
        )
        marker.write_text("", encoding="utf-8")
        wait_until(
            lambda: "shared/notes.md" in rgit(ws, "ls-tree", "-r", "--name-only", "HEAD"),
            timeout=30,
            message="the merge landed",
        )
    fmt = "--format=%(trailers:key=Jpfs-Event,valueonly,separator=,) by %(trailers:key=Jpfs-Machine,valueonly,separator=,)"
    made = rgit(ws, "log", fmt, "--", "shared").split("\n")
    assert "edit by laptop" in made  # the laptop's human wrote it
    assert [line for line in made if "desk" in line] == []  # never an edit of the desk's
    assert rgit(ws, "status", "--porcelain") == ""


def taken_over(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> tuple[Path, Path, SyncEngine, SyncEngine]:
    """The remote, a peer clone, and two engines: ``ws``'s claimed the conversation
    ``work``, then the peer's took its lease over (``ws``'s does not know yet)."""
    remote = share_record(tmp_path, ws, cli, lease="0.5", interval="0.1")
    other = clone_sharing(remote, tmp_path / "other", cli)
    slow, fast = engine_at(ws), engine_at(other)
    (ws / "conversations" / "work").mkdir()
    (ws / "conversations" / "work" / "task.md").write_text("# Work\n", encoding="utf-8")
    assert cli("sync").code == 0
    assert slow.claim("work")
    wait_until(lambda: fast.fetch() is not None and fast.claim("work"), timeout=10, interval=0.1)
    return remote, other, slow, fast


def turn(clone_: Path, text: str) -> None:
    """A turn's result committed in ``clone_``'s record (``work/result.md``)."""
    (clone_ / "conversations" / "work" / "result.md").write_text(text, encoding="utf-8")
    rgit(clone_, "add", "-A")
    rgit(clone_, "commit", "-q", "-m", text.strip())


def test_a_forfeited_conversation_stays_forfeit_while_its_cancelled_run_still_writes(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """A run cancelled when its lease was lost may still commit its late turn after the
    merge that took the new holder's version in. Taken in as ours, it met the holder's
    next turn as a conflict (a copy of ours kept beside theirs, in the record). While
    the run goes on, every merge takes theirs; once it has stopped, the forfeit ends."""
    remote, other, slow, fast = taken_over(ws, tmp_path, cli)
    still_running = {"work"}
    slow.running = still_running.__contains__
    conv = ws / "conversations" / "work"
    turn(other, "the turn\n")
    fast.sync_once()
    slow.sync_once()  # the lease is lost: the remote's version is taken in
    assert slow.stats.forfeits == 1 and (conv / "result.md").read_text() == "the turn\n"
    turn(ws, "late turn\n")  # the cancelled run writes on
    turn(other, "the next turn\n")  # and so does the new holder
    fast.sync_once()
    slow.sync_once()
    assert (conv / "result.md").read_text(encoding="utf-8") == "the next turn\n"
    assert "conflict" not in rgit(ws, "ls-tree", "-r", "--name-only", "HEAD")
    assert slow.book.forfeits() == ["work"]  # its run has not stopped yet
    still_running.clear()
    slow.sync_once()
    assert slow.book.forfeits() == []
    assert git(remote, "show", "jpfs-record:work/result.md") == "the next turn\n"
    assert rgit(ws, "status", "--porcelain") == ""


def test_a_late_turn_committed_between_a_forfeit_merge_and_its_push_stays_here(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """The cancelled run commits its late turn right after the merge that took the new
    holder's version in, before that cycle's push: the push must not carry it (it would
    land on the remote as a fast-forward). The record is not pushed while it changes a
    forfeited conversation; the next merge takes theirs again."""
    remote, other, slow, fast = taken_over(ws, tmp_path, cli)
    conv = ws / "conversations" / "work"
    turn(other, "the turn\n")
    fast.sync_once()
    still_running, late = {"work"}, iter(["late turn\n"])

    def writes_on(conv_id: str) -> bool:
        # Asked right after the merge that follows the lost lease, before that cycle's
        # push: the cancelled run commits its late turn at that very moment.
        for text in late:
            turn(ws, text)
        return conv_id in still_running

    slow.running = writes_on
    slow.sync_once()  # the lease is lost; the merge takes theirs; the late turn lands here
    assert slow.stats.forfeits == 1
    assert "late turn" in rgit(ws, "log", "-3", "--format=%s")
    assert git(remote, "show", "jpfs-record:work/result.md") == "the turn\n"
    still_running.clear()
    slow.sync_once()  # the run has stopped: theirs taken again, and the forfeit ends
    assert slow.book.forfeits() == []
    assert (conv / "result.md").read_text(encoding="utf-8") == "the turn\n"
    assert git(remote, "show", "jpfs-record:work/result.md") == "the turn\n"
    assert rgit(ws, "rev-parse", "HEAD") == git(remote, "rev-parse", "jpfs-record")


def test_a_conflict_copy_is_named_after_the_machine_once(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """A group commit of several changes carries a ``Jpfs-Machine`` trailer per change:
    the copy of theirs is named after that machine once (``.conflict-desk``, not
    ``.conflict-deskdesk``)."""
    remote = share_record(tmp_path, ws, cli)
    laptop = clone_sharing(remote, tmp_path / "laptop", cli)
    assert cli("config", "set", "sync.machine", "laptop", cwd=laptop).code == 0
    for clone_, text in ((ws, "# From the desk\n"), (laptop, "# From the laptop\n")):
        (clone_ / "conversations" / "notes").mkdir()
        (clone_ / "conversations" / "notes" / "task.md").write_text(text, encoding="utf-8")
    rgit(ws, "add", "-A")
    trailers = "Jpfs-Machine: desk\nJpfs-Event: edit\nJpfs-Machine: desk"
    rgit(ws, "commit", "-q", "-m", f"jpfs(notes): edit\n\n{trailers}")
    assert cli("sync").code == 0
    merged = cli("sync", cwd=laptop)
    assert merged.code == 0, merged.stderr
    assert (laptop / "conversations" / "notes" / "task.md.conflict-desk").is_file()


@pytest.mark.parametrize(
    "key,value,says",
    [("lease", "0", "must be positive"), ("interval", "-1", "must be positive"),
     ("lease", "1", "at least 3 x sync.interval")],
)  # fmt: skip
def test_sync_timings_out_of_range_are_refused_with_the_fix(
    ws: Path, tmp_path: Path, cli: Callable[..., Result], key: str, value: str, says: str
) -> None:
    share_record(tmp_path, ws, cli)
    assert cli("config", "set", "--", f"sync.{key}", value).code == 0
    done = cli("sync")
    assert done.code == 1 and says in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("key,value", [("lease", '"soon"'), ("interval", "[1]")])
def test_sync_keys_are_validated(
    ws: Path, cli: Callable[..., Result], key: str, value: str
) -> None:
    done = cli("config", "set", f"sync.{key}", value)
    assert done.code != 0 and f"sync.{key}" in done.stderr


AGENT = """
model = "claude-sync"
provider = "anthropic"
[onboarding]
enabled = false
"""


def test_jpfs_query_holds_the_lease_while_it_runs_and_pushes_after(
    ws: Path, tmp_path: Path, cli: Callable[..., Result], api_env: MessagesServer
) -> None:
    use_only_agent(ws, "syncer", AGENT)
    remote = share_record(tmp_path, ws, cli)
    leases_during: list[str] = []

    def respond(request: dict[str, object]) -> object:
        leases_during.append(
            git(remote, "for-each-ref", "--format=%(contents:body)", "refs/jpfs/leases/")
        )
        return text_reply("Hello back.")

    api_env.responder = respond  # type: ignore[assignment]
    done = cli("query", "--new", "--non-interactive", "Say hello.")
    assert done.code == 0, done.stderr
    assert "Hello back." in done.stdout
    # While the model answered, the remote held this machine's lease on the run.
    assert len(leases_during) == 1 and "Jpfs-Machine: " in leases_during[0], leases_during
    conv_id = re.search(r"Jpfs-Conversation: (\S+)", leases_during[0])
    assert conv_id is not None
    # After: the lease is given back, with the result on the remote.
    assert held_leases(remote) == []
    result = git(remote, "show", f"jpfs-record:{conv_id.group(1)}/result.md")
    assert "Hello back." in result


def test_a_query_on_a_conversation_another_machine_holds_is_refused(
    ws: Path, tmp_path: Path, cli: Callable[..., Result], api_env: MessagesServer
) -> None:
    use_only_agent(ws, "syncer", AGENT)
    remote = share_record(tmp_path, ws, cli)
    assert cli("conversation", "new", "job", "--no-activate").code == 0
    assert cli("sync").code == 0
    other = clone_sharing(remote, tmp_path / "other", cli)
    holder = engine_at(other)
    holder.sync_once()
    assert holder.claim("job")
    refused = cli("query", "--id", "job", "--non-interactive", "Go on.")
    assert refused.code == 1, refused.stderr
    assert "job is being run on another machine sharing the record" in refused.stderr
    assert api_env.requests == []  # the model was never asked
    holder.release("job")
    holder.sync_once()
    api_env.responder = lambda request: text_reply("Went on.")
    done = cli("query", "--id", "job", "--non-interactive", "Go on.")
    assert done.code == 0, done.stderr


def test_a_run_longer_than_the_lease_keeps_it_renewed(
    ws: Path, tmp_path: Path, cli: Callable[..., Result], api_env: MessagesServer
) -> None:
    use_only_agent(ws, "syncer", AGENT)
    remote = share_record(tmp_path, ws, cli, lease="0.6", interval="0.2")
    other = clone_sharing(remote, tmp_path / "other", cli)
    rival = engine_at(other)
    seen: dict[str, object] = {}

    def lease_value() -> str:
        return git(remote, "for-each-ref", "--format=%(objectname)", "refs/jpfs/leases/").strip()

    def respond(request: dict[str, object]) -> object:
        # The model takes several leases' time: the lease must be renewed meanwhile,
        # and a peer watching it must never see it expire.
        rival.fetch()
        watched_from, values = time.monotonic(), {lease_value()}

        def renewed_for_longer_than_the_lease() -> bool:
            values.add(lease_value())
            return time.monotonic() - watched_from > 1.5 * 0.6 and len(values) >= 4

        # The model thinks for longer than the lease; meanwhile the holder renews it.
        wait_until(renewed_for_longer_than_the_lease, timeout=20, interval=0.05)
        rival.fetch()
        seen["rival"] = rival.claim("long")
        return text_reply("Long answer.")

    api_env.responder = respond  # type: ignore[assignment]
    assert cli("conversation", "new", "long", "--no-activate").code == 0
    done = cli("query", "--id", "long", "--non-interactive", "Think long.")
    assert done.code == 0, done.stderr
    assert seen["rival"] is False  # renewed, never expired in the peer's eyes
    assert held_leases(remote) == []  # given back at the end, with the result
    assert "Long answer." in git(remote, "show", "jpfs-record:long/result.md")
    # Released to a tombstone that names a record commit holding that result.
    (released,) = git(remote, "log", "-1", "--format=%(trailers:key=Jpfs-Released,valueonly)",
                      lease_value()).split()  # fmt: skip
    assert "Long answer." in git(remote, "show", f"{released}:long/result.md")


def test_a_sync_that_cannot_merge_says_nothing_was_pushed_and_what_to_do(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    remote = share_record(tmp_path, ws, cli)
    laptop = clone_sharing(remote, tmp_path / "laptop", cli)
    (laptop / "conversations" / "new").mkdir()
    (laptop / "conversations" / "new" / "task.md").write_text("# New\n", encoding="utf-8")
    assert cli("sync", cwd=laptop).code == 0
    (ws / "conversations" / "mine").mkdir()
    (ws / "conversations" / "mine" / "task.md").write_text("# Mine\n", encoding="utf-8")
    # Someone holds the record worktree's index (a `git add` in progress there).
    lock = Path(rgit(ws, "rev-parse", "--git-dir").strip())
    lock = (ws / "conversations" / lock if not lock.is_absolute() else lock) / "index.lock"
    lock.write_text("", encoding="utf-8")
    busy = cli("sync")
    assert busy.code == 1
    assert "could not be merged here" in busy.stderr
    assert "your edits are committed here" in busy.stderr
    assert "nothing was pushed: run `jpfs sync` again" in busy.stderr
    assert "mine/task.md" not in git(remote, "ls-tree", "-r", "--name-only", "jpfs-record")
    lock.unlink()
    done = cli("sync")
    assert done.code == 0, done.stderr
    assert "mine/task.md" in git(remote, "ls-tree", "-r", "--name-only", "jpfs-record")
    assert (ws / "conversations" / "new" / "task.md").is_file()


def abort_record_updates(ws: Path, marker: Path, then: str = "") -> None:
    """A ``reference-transaction`` hook in ``ws``'s repository that aborts every git
    update of the record branch (a merge's), as a lost compare-and-swap is, until
    ``marker`` exists; ``then``: shell run before each abort. (jpfs's own commits move
    the branch in process: no hook runs for them.)"""
    common = Path(rgit(ws, "rev-parse", "--path-format=absolute", "--git-common-dir").strip())
    script = common / "hooks" / "reference-transaction"
    script.parent.mkdir(exist_ok=True)
    script.write_text(
        "#!/bin/sh\n"
        '[ "$1" = prepared ] || exit 0\n'
        "grep -q ' refs/heads/jpfs-record$' || exit 0\n"
        f"[ -e '{marker}' ] && exit 0\n"
        f"{then}\n"
        "exit 1\n",
        encoding="utf-8",
    )
    script.chmod(0o755)


def test_a_merge_whose_branch_update_loses_leaves_no_file_beside_the_branch(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """A commit lands here between a merge's checkout and its compare-and-swap of the
    branch, and holds the index a moment after: the merge tries again and waits the
    lock out. Returning "busy" then left the peer's files in the worktree with the
    branch short of them, which a daemon took for a human's edit (and committed as
    one)."""
    remote = share_record(tmp_path, ws, cli)
    laptop = clone_sharing(remote, tmp_path / "laptop", cli)
    write_task(laptop, "theirs", "# Theirs\n")
    assert cli("sync", cwd=laptop).code == 0
    write_task(ws, "mine", "# Mine\n")
    gitdir = Path(rgit(ws, "rev-parse", "--absolute-git-dir").strip())
    marker, lock = tmp_path / "aborted-once", gitdir / "index.lock"
    # The first update of the record branch (the merge's) is aborted, and the index is
    # held 0.3 s by "another git command".
    abort_record_updates(
        ws,
        marker,
        then=f": > '{marker}'; : > '{lock}'; (sleep 0.3; rm -f '{lock}') >/dev/null 2>&1 &",
    )
    done = cli("sync")
    assert done.code == 0, done.stderr
    assert marker.exists()  # the first attempt lost
    wait_until(lambda: not lock.exists(), 10, message="the index lock's holder to let it go")
    assert rgit(ws, "status", "--porcelain", "--untracked-files=all") == ""
    listed = rgit(ws, "ls-tree", "-r", "--name-only", "HEAD").split()
    assert {"theirs/task.md", "mine/task.md"} <= set(listed)
    assert git(remote, "rev-parse", "jpfs-record") == rgit(ws, "rev-parse", "HEAD")


def hook(remote: Path, body: str) -> Path:
    """A ``pre-receive`` hook on the bare ``remote``; returns the file each run of it
    appends a line to (how many pushes reached it)."""
    runs = remote / "hook-runs"
    script = remote / "hooks" / "pre-receive"
    script.write_text(f"#!/bin/sh\necho run >> '{runs}'\n{body}", encoding="utf-8")
    script.chmod(0o755)
    return runs


def runs_of(runs: Path) -> int:
    return len(runs.read_text(encoding="utf-8").splitlines()) if runs.exists() else 0


# Before each push of the record, a peer's commit lands on it: every compare-and-swap of
# ours loses, as it would to peers that always push first. (The hook writes the peer's
# commit and moves the ref outside the push's quarantine, as another push would.)
PEER_FIRST = """\
while read old new ref; do
  [ "$ref" = refs/heads/jpfs-record ] || continue
  tip=$(git rev-parse refs/heads/jpfs-record)
  main="env -u GIT_QUARANTINE_PATH -u GIT_OBJECT_DIRECTORY -u GIT_ALTERNATE_OBJECT_DIRECTORIES"
  moved=$($main GIT_AUTHOR_NAME=peer GIT_AUTHOR_EMAIL=peer@example.com \\
    GIT_COMMITTER_NAME=peer GIT_COMMITTER_EMAIL=peer@example.com \\
    git commit-tree "$tip^{tree}" -p "$tip" -m "a peer's commit" </dev/null)
  $main git update-ref refs/heads/jpfs-record "$moved" "$tip"
done
exit 0
"""


def test_a_push_the_remote_refuses_says_why_at_once(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """A hook or a protected ref refuses every try alike: the push of the record and a
    claim fail at once with git's reason and the remote's words, not as a race lost
    to other machines four times over."""
    remote = share_record(tmp_path, ws, cli)
    runs = hook(remote, "echo 'jpfs-record is read-only on this server' >&2\nexit 1\n")
    write_task(ws, "first", "# First\n")
    ours = engine_at(ws)
    with pytest.raises(GitError) as refused:
        ours.sync_once(eager=True)
    assert not isinstance(refused.value, Contended)
    said = str(refused.value)
    assert "refused the push of the record" in said and "pre-receive hook declined" in said
    assert "jpfs-record is read-only on this server" in said
    assert "let this machine push them" in said  # what to do about it
    assert runs_of(runs) == 1  # one try: another could only be refused too
    with pytest.raises(GitError, match=r"refused the claim: .*read-only on this server"):
        ours.claim("first")
    done = cli("sync")
    assert done.code == 1
    assert "pre-receive hook declined" in done.stderr and "read-only on this server" in done.stderr
    assert "first" not in git(remote, "ls-tree", "--name-only", "jpfs-record")


def test_a_record_push_that_loses_every_race_is_no_error_for_the_daemon(
    ws: Path, tmp_path: Path, cli: Callable[..., Result], caplog: pytest.LogCaptureFixture
) -> None:
    """Peers pushing first at every try: by hand, ``jpfs sync`` says so after 4 tries;
    a daemon's cycle logs it and tries again at its next cycle, with no error in its
    status (nothing is wrong). Once the races end, the record goes."""
    remote = share_record(tmp_path, ws, cli, interval="0.2")
    runs = hook(remote, PEER_FIRST)
    write_task(ws, "first", "# First\n")
    ours = engine_at(ws)
    with pytest.raises(Contended, match="other machines pushed first 4 times in a row"):
        ours.sync_once(eager=True)
    assert runs_of(runs) == 5  # the push first, then 4 after a fetch and a merge each
    caplog.set_level(logging.INFO, logger="jpfs.services.sync")
    stop = threading.Event()
    thread = threading.Thread(target=cycling.run, args=(ours, stop))
    thread.start()
    try:
        wait_until(lambda: runs_of(runs) >= 12, message="two cycles' tries lost")
        assert ours.stats.last_error == ""
        lost = [r for r in caplog.records if "other machines pushed first" in r.getMessage()]
        assert lost and all(r.levelno == logging.INFO for r in lost)
        (remote / "hooks" / "pre-receive").unlink()  # the peers are done
        wait_until(
            lambda: "first" in git(remote, "ls-tree", "--name-only", "jpfs-record"),
            message="the record pushed once the races end",
        )
    finally:
        stop.set()
        ours.wake.set()
        thread.join(60)
    assert not thread.is_alive()
    assert ours.stats.last_error == ""
