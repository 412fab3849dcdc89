"""The committer's O(changes) paths, checked against git itself: trees spliced from
cached entries, loose objects written by jpfs, racily clean entries re-checked a few at
a time, and group commit handing the lead from batch to batch."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import jpfs.infra.committer.indexfile as indexfile
import jpfs.infra.committer.objects as objects
import jpfs.infra.committer.trees as trees
import jpfs.infra.committer.worktree as worktree
from jpfs.infra.committer import Change, Committer
from tests.conftest import wait_until
from tests.infra.committer.test_committer import assert_consistent, git, init_repo, write


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = init_repo(tmp_path / "repo")
    (path / "README").write_text("readme\n")
    git(path, "add", "README")
    git(path, "commit", "-q", "-m", "initial")
    return path


@pytest.fixture
def committer(repo: Path) -> Iterator[Committer]:
    with Committer(repo) as c:
        yield c


def git_tree_of_worktree(repo: Path) -> str:
    """The tree git itself makes of the whole work tree (on a scratch index)."""
    env = {**os.environ, "GIT_INDEX_FILE": str(repo / ".git" / "scratch-index")}
    subprocess.run(["git", "add", "-A"], cwd=repo, env=env, check=True)
    done = subprocess.run(
        ["git", "write-tree"], cwd=repo, env=env, check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def test_spliced_trees_are_the_trees_git_writes(repo: Path, committer: Committer) -> None:
    # Names that sort differently as files and as directories ("a" < "a-" < "a.b" <
    # "a/..." in git's order) and a file that becomes a directory and back: each commit
    # splices entries into the cached previous tree, which must stay in git's order.
    rng = random.Random(7)
    names = ["a", "a-", "a.b", "a0", "b", "events/0001-user.md", "z"]
    names += [f"events/{n:04d}-assistant.md" for n in range(2, 120)]
    present: set[str] = set()
    for step in range(60):
        name = rng.choice(names)
        path = repo / "c" / name
        if name in present and rng.random() < 0.3:
            path.unlink()
            present.discard(name)
        elif name == "a" and rng.random() < 0.3:
            if path.is_file():
                path.unlink()
                present.discard(name)
            (path / "inner").mkdir(parents=True, exist_ok=True)
            (path / "inner" / "x").write_text(f"{step}\n")
        else:
            if path.is_dir():
                for sub in sorted(path.rglob("*"), reverse=True):
                    sub.unlink() if sub.is_file() else sub.rmdir()
                path.rmdir()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"{name} {step}\n")
            present.add(name)
        committer.commit(Change(("c",) if step % 5 == 0 else (f"c/{name}",), f"step {step}"))
        committer.commit(Change(("c",), f"step {step} (directory)"))
        head_tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
        assert head_tree == git_tree_of_worktree(repo), f"step {step}: {name}"
    assert_consistent(repo)


def test_a_thousand_entry_directory_grows_by_one_entry(repo: Path, committer: Committer) -> None:
    for n in range(1, 1001):
        write(repo, f"conv/events/{n:04d}-user.md", f"{n}\n")
    assert committer.commit(Change(("conv",), "all")) is not None
    for n in range(1001, 1006):
        rel = write(repo, f"conv/events/{n:04d}-assistant.md", f"{n}\n")
        assert committer.commit(Change((rel,), f"event {n}")) is not None
        listed = git(repo, "ls-tree", "--name-only", "HEAD", "conv/events/").split()
        assert listed == sorted(listed) and len(listed) == n
    assert git(repo, "rev-parse", "HEAD^{tree}").strip() == git_tree_of_worktree(repo)
    assert_consistent(repo)


def test_the_tree_cache_is_bounded_by_entries(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every commit makes a new version of the root; superseded ones must go, or a
    # daemon's memory grows with each commit until the cache holds hundreds of roots.
    monkeypatch.setattr(trees, "_TREE_CACHE_ENTRIES", 500)
    for n in range(200):
        write(repo, f"c{n:03d}/task.md", f"{n}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "200 conversations")
    with Committer(repo) as committer:
        cache = committer._trees  # this committer's own cache, the thing under test
        for n in range(0, 200, 5):
            rel = write(repo, f"c{n:03d}/events/0001-user.md", f"{n}\n")
            assert committer.commit(Change((rel,), f"event {n}")) is not None
            assert cache.entries <= 500
            assert 0 < len(cache) < 60  # not a version of the root per commit
        assert git(repo, "rev-parse", "HEAD^{tree}").strip() == git_tree_of_worktree(repo)
        # The root alone is over the bound at 600 entries: still cached, alone.
        for n in range(200, 600):
            write(repo, f"c{n:03d}/task.md", f"{n}\n")
        assert committer.commit(Change(tuple(f"c{n:03d}" for n in range(200, 600)), "more"))
        assert len(cache) >= 1
    assert_consistent(repo)


def test_remembered_files_are_bounded(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The stat data and blob ids of files read, which spare re-hashing a conversation's
    # events at each commit, are kept for the files read last only.
    monkeypatch.setattr(worktree, "_KNOWN_MAX", 3)
    monkeypatch.setattr(worktree, "_SETTLED_NS", 0)  # every file remembered at once
    with Committer(repo) as committer:
        for n in range(12):
            write(repo, f"c/events/{n:04d}-user.md", f"{n}\n")
            assert committer.commit(Change(("c",), f"event {n}")) is not None
            known = committer._worktree._known  # the committer's own cache, under test
            assert len(known) <= 3
        assert len(known) == 3
        forgotten = sorted({f"c/events/{n:04d}-user.md" for n in range(12)} - set(known))[0]
        write(repo, forgotten, "changed\n")  # a forgotten file is read and committed as any
        assert committer.commit(Change(("c",), "edit")) is not None
    assert git(repo, "show", f"HEAD:{forgotten}") == "changed\n"
    assert git(repo, "rev-parse", "HEAD^{tree}").strip() == git_tree_of_worktree(repo)
    assert_consistent(repo)


def test_a_loose_object_in_a_new_fan_out_directory_is_written_once(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects_dir = repo / ".git" / "objects"
    data = b"a blob whose fan-out directory does not exist yet\n"
    oid = hashlib.sha1(b"blob %d\0%s" % (len(data), data)).digest()
    shutil.rmtree(objects_dir / oid.hex()[:2], ignore_errors=True)
    created: list[str] = []
    real_open = os.open

    def counting_open(path: str, flags: int, *args: int, **kwargs: int) -> int:
        if flags & os.O_CREAT:
            created.append(os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting_open)  # counts, the real call does the work
    objects.write_loose(objects_dir, objects.BLOB, data, oid, False)
    monkeypatch.undo()
    assert len(created) == 1  # one temporary file, renamed once its directory was made
    assert git(repo, "cat-file", "-p", oid.hex()) == data.decode()
    assert not list(objects_dir.glob("tmp_obj_jpfs_*"))


def test_loose_objects_are_git_readable(repo: Path, committer: Committer) -> None:
    rel = write(repo, "conv/m.md", "a loose object\n")
    sha = committer.commit(Change((rel,), "loose"))
    assert sha is not None
    assert git(repo, "cat-file", "-p", f"{sha}:{rel}") == "a loose object\n"
    assert git(repo, "count-objects").split()[0] != "0"  # written loose, not packed
    assert not list((repo / ".git" / "objects").glob("tmp_obj_jpfs_*"))
    assert_consistent(repo)


def _stage_racy(repo: Path, name: str) -> int | None:
    """Stage ``name``, then change it to the same size and mtime within the index's
    second: git can tell only by re-reading it. The second, or None if it slipped."""
    path = repo / name
    path.write_text("aaaa\n")
    git(repo, "add", name)
    st = path.stat()
    path.write_text("bbbb\n")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = int((repo / ".git/index").stat().st_mtime)
    if int(path.stat().st_ctime) == int(st.st_ctime) == second == int(time.time()):
        return second
    return None


def test_racy_entry_of_this_second_stays_racy(repo: Path, committer: Committer) -> None:
    # A commit within the second of a racily clean entry does not re-check it: the index
    # it writes keeps an mtime no later than that second, so git still re-checks it.
    for attempt in range(5):
        second = _stage_racy(repo, "racy.txt")
        if second is None:
            continue
        # New content each attempt: an attempt that crossed a second has committed the last.
        rel = write(repo, "conversations/r.md", f"r{attempt}\n")
        assert committer.commit(Change((rel,), "r")) is not None
        if int(time.time()) == second:
            break
    else:
        pytest.skip("could not stage and commit within one second")
    assert int((repo / ".git/index").stat().st_mtime) <= second
    assert "racy.txt" in git(repo, "diff", "--name-only")
    # Once the second is over, the next commit re-checks (and smudges) it for good.
    wait_until(lambda: int(time.time()) > second, timeout=3, message="the next second")
    rel = write(repo, "conversations/s.md", "s\n")
    assert committer.commit(Change((rel,), "s")) is not None
    assert "racy.txt" in git(repo, "diff", "--name-only")


def test_racy_rechecks_are_spread_over_commits(
    repo: Path, committer: Committer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With one re-check per index write, entries left unchecked stay racy (the index's
    # mtime is set back to their second), so git never takes a changed file as clean.
    monkeypatch.setattr(indexfile, "_RECHECKS", 1)
    for _attempt in range(5):
        path_a, path_b = repo / "ra.txt", repo / "rb.txt"
        path_a.write_text("aaaa\n")
        path_b.write_text("aaaa\n")
        git(repo, "add", "ra.txt", "rb.txt")
        stats = [path_a.stat(), path_b.stat()]
        for path, st in zip((path_a, path_b), stats, strict=True):
            path.write_text("bbbb\n")
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        second = int((repo / ".git/index").stat().st_mtime)
        if all(int(st.st_mtime) == second for st in stats):
            break
    else:
        pytest.skip("could not stage two racy entries within one second")
    wait_until(lambda: int(time.time()) > second, timeout=3, message="the next second")
    for n in range(3):
        rel = write(repo, f"conversations/s{n}.md", f"{n}\n")
        assert committer.commit(Change((rel,), f"s{n}")) is not None
        assert {"ra.txt", "rb.txt"} <= set(git(repo, "diff", "--name-only").split())


def test_racy_rechecks_make_progress(
    repo: Path, committer: Committer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # More racy entries of one second than one write re-checks: each write checks the
    # next ones, so the index's mtime moves past that second after a few writes.
    monkeypatch.setattr(indexfile, "_RECHECKS", 2)
    for attempt in range(5):
        start = int(time.time())
        for n in range(6):
            write(repo, f"conversations/p/{n}.md", f"{attempt} {n}\n")
        assert committer.commit(Change(("conversations/p",), "six")) is not None
        if int(time.time()) == start:
            break
    else:
        pytest.skip("could not commit within one second")
    wait_until(lambda: time.time() - 0.1 > start + 1, timeout=3, message="the next second")
    for n in range(4):
        rel = write(repo, f"conversations/q{n}.md", f"{n}\n")
        assert committer.commit(Change((rel,), f"q{n}")) is not None
    assert int((repo / ".git/index").stat().st_mtime) > start
    assert git(repo, "status", "--porcelain") == ""


def test_group_commit_hands_the_lead_on(repo: Path, committer: Committer) -> None:
    # 24 threads committing in a loop: every change lands exactly once, in a commit
    # that holds it, with no thread left waiting (each wakes on its own lock).
    threads, writes = 24, 6
    start = threading.Barrier(threads)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        start.wait()
        try:
            for i in range(writes):
                rel = write(repo, f"conversations/g{n}/m{i}.md", f"{n} {i}\n")
                sha = committer.commit(Change((rel,), f"g{n} m{i}"))
                assert sha is not None
                assert git(repo, "cat-file", "-p", f"{sha}:{rel}") == f"{n} {i}\n"
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=writer, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in pool)
    assert not errors
    assert len(git(repo, "ls-files", "conversations").split()) == threads * writes
    assert_consistent(repo)
