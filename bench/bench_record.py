"""Benchmark commits on the record branch, on the real runtime path.

Usage: python bench/bench_record.py [--quick] [--commits N] [--threads T] [--writes K]
                                    [--conversations N]

Every jpfs commit here is what the runtime does after a model reply,
:meth:`Runner.record_event`: an event numbered by the conversation's handle, its file
made by the committer as it commits the conversation's own files on ``jpfs-record``
(the run's first commit the whole ``events/``, later ones the events written since),
with the record worktree's index kept in step. The workspace is made by ``jpfs init``
and filled with N idle conversations of 10 events (default 1,000); every size's
workspace is made before the first is measured.

* **events**: one commit into a conversation of 10 events against one of 1,000 events
  (measured in alternation): the cost must not grow with the conversation;
* **single writer**: those commits one after another, against a raw git plumbing loop
  doing the least a commit needs, one process per step: ``hash-object -w``,
  ``update-index --add`` (a private copy of the record's index), ``write-tree``,
  ``commit-tree``, ``update-ref NEW OLD`` (on a branch of its own, forked from the
  record, so the baseline never reverts jpfs's commits);
* **writers**: T threads (default 50), each appending to its own conversation K times
  (group commit), as T runs do: each holds its conversation's run lock with its handle
  exclusive and has committed the caller's edits (:meth:`Runner.drive`) before the
  barrier that starts them together. Committed writes per second and p50/p99 latency of
  a write+commit, and the p99 without each writer's first turn (the round in which the
  group commit first sees them all; see :mod:`jpfs.infra.committer.batch`).
  Next to it, the cost of one file creation measured just before (one thread, the
  helper an event append uses, no git): the file system's share of every write, which
  on this machine depends on what other processes deleted in the last minutes (see
  :func:`bench_creates`).

``main(argv)`` returns the numbers as a dict for ``python -m bench``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    Stats,
    git,
    make_workspace,
    measure_interleaved,
    ms,
    percentile,
    pin_environment,
    populate,
    print_machine,
    print_table,
    temp_dir,
)
from jpfs.core import locks, record
from jpfs.core.conversation import Conversation, create
from jpfs.core.workspace import Workspace, open_workspace
from jpfs.infra import textfile
from jpfs.services.run.runtime import Runner

_BODY = "The parser rejects empty input; see src/parse.py line 40. " * 4


def _conversation(ws: Workspace, conv_id: str, events: int) -> Conversation:
    conv = create(ws.conv_root, conv_id, agent="default", title=conv_id, config={})
    for n in range(events):
        conv.append_event("user" if n % 2 == 0 else "assistant", f"{_BODY} ({n})")
    record.commit(ws, conv_id, "new")
    return conv


def _turn(runner: Runner, conv: Conversation) -> None:
    """What the runtime does after a model reply (:meth:`Runner.work_step`)."""
    runner.record_event(
        conv, "assistant", _BODY, {"model": "claude-bench"}, event="assistant", model="claude-bench"
    )


def _raw_loop(conv_root: Path, counter: list[int], index: Path) -> None:
    """The least a commit on the record needs, with git's own tools (on a private index,
    so that it never disturbs the record's own)."""
    import subprocess

    n = counter[0] = counter[0] + 1
    rel = f"raw/{n:06d}.md"
    path = conv_root / rel
    path.parent.mkdir(exist_ok=True)
    path.write_text(_BODY, encoding="utf-8")
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}

    def run(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=conv_root, env=env, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    blob = run("hash-object", "-w", rel)
    run("update-index", "--add", "--cacheinfo", f"100644,{blob},{rel}")
    tree = run("write-tree")
    # A branch of its own, forked from the record: the baseline never disturbs it.
    old = run("rev-parse", "refs/heads/bench-raw")
    commit = run("commit-tree", tree, "-p", old, "-m", f"raw {n}")
    run("update-ref", "refs/heads/bench-raw", commit, old)


def bench_events(ws: Workspace, commits: int) -> dict[str, Stats]:
    short = _conversation(ws, "ev-short", 10)
    long = _conversation(ws, "ev-long", 1000)
    runner = Runner(ws)
    counter = [0]
    gitdir = Path(git(ws.conv_root, "rev-parse", "--path-format=absolute", "--git-dir"))
    private = gitdir / "bench-raw-index"
    shutil.copy(gitdir / "index", private)
    git(ws.conv_root, "branch", "-f", "bench-raw", "HEAD")
    with contextlib.ExitStack() as held:
        for conv in (short, long):  # as a run holds them (Runner.run_locked)
            held.enter_context(locks.conversation_lock(ws.local_dir, conv.id))
            held.enter_context(conv.exclusive())
        return measure_interleaved(
            {
                "10 events": lambda: _turn(runner, short),
                "1000 events": lambda: _turn(runner, long),
                "raw plumbing": lambda: _raw_loop(ws.conv_root, counter, private),
            },
            repeat=commits,
            warmup=2,
        )


def bench_writers(ws: Workspace, threads: int, writes: int) -> dict[str, float]:
    convs = [_conversation(ws, f"w-{n:03d}", 2) for n in range(threads)]
    latencies: list[float] = []
    later: list[float] = []  # every turn but each writer's first
    lock = threading.Lock()
    start = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    runner = Runner(ws)

    def writer(conv: Conversation) -> None:
        mine = []
        try:
            # As a run does (Runner.run_locked, Runner.drive): its lock held, its handle
            # exclusive, the caller's edits committed before its first model turn.
            with locks.conversation_lock(ws.local_dir, conv.id), conv.exclusive():
                runner.commit_caller_edits(conv)
                start.wait()
                for _ in range(writes):
                    t0 = time.perf_counter()
                    _turn(runner, conv)
                    mine.append(time.perf_counter() - t0)
        except BaseException as exc:  # reported below: a bench must not hide a failure
            errors.append(exc)
            start.abort()
        with lock:
            latencies.extend(mine)
            later.extend(mine[1:])

    pool = [threading.Thread(target=writer, args=(c,)) for c in convs]
    for t in pool:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return {
        "writes_per_s": len(latencies) / elapsed,
        "p50_s": percentile(latencies, 50),
        "p99_s": percentile(latencies, 99),
        # The first turns start together from a barrier, right after the set-up's
        # commits: the group commit has not yet seen the writers as one round.
        "p99_later_s": percentile(later, 99),
        "writes": float(len(latencies)),
    }


def bench_creates(ws: Workspace, count: int) -> float:
    """Seconds per file creation as an event append makes it (:func:`textfile.create_new`),
    one thread, in a directory of the record worktree: what this file system charges
    for the inode every write needs, in the state the writers meet. On ext4 without a
    journal (this machine) it grows with the inodes freed in the last minute or more
    (``recently_deleted()`` in fs/ext4/ialloc.c: 60 s, 360 s while their inode table
    block is dirty), by any process: 20-60 us when none were, 0.3-0.8 ms after a test
    run."""
    target = ws.conv_root / "raw" / "creates"
    target.mkdir(parents=True)
    text = f'+++\nrole = "assistant"\n+++\n{_BODY}\n'
    t0 = time.perf_counter()
    for n in range(count):
        textfile.create_new(target / f"{n:04d}-assistant.md", text, parents=False)
    return (time.perf_counter() - t0) / count


def bench_index_codec(ws: Workspace, repeat: int) -> dict[str, Stats]:
    """One index update of the record's own index as a commit does it (the index is
    parsed once and kept, as the committer does; one entry set, the file rewritten):
    jpfs's codec writing the whole index, and split (what a commit writes from 10,000
    entries on), against libgit2 writing the whole index; the codec must beat libgit2
    by 2x to be kept."""
    import pygit2

    from jpfs.infra.committer.indexfile import FastIndex
    from jpfs.infra.committer.splitindex import NO_SPLIT, SplitPolicy

    gitdir = Path(git(ws.conv_root, "rev-parse", "--path-format=absolute", "--git-dir"))
    source = gitdir / "index"
    scratch = gitdir / "jpfs-bench"
    scratch.mkdir(exist_ok=True)
    blob = pygit2.Oid(raw=bytes(20))
    st = os.stat(source)
    fast_index = FastIndex.parse(source.read_bytes(), st, gitdir)  # split or not
    split_index = FastIndex.parse(source.read_bytes(), st, gitdir)
    never = lambda _p, _o: False  # noqa: E731
    # libgit2 reads no split index: give it the whole one.
    fast_index.save(scratch / "libgit2-index", scratch, never, fsync=False, skip_hash=False)
    libgit2_index = pygit2.Index(str(scratch / "libgit2-index"))
    split_dir = scratch / "split"
    split_dir.mkdir(exist_ok=True)
    always = SplitPolicy(enabled=True)
    counter = [0]

    def update(index: FastIndex, target: Path, policy: SplitPolicy) -> None:
        counter[0] += 1
        index.set(f"bench/{counter[0]}.md".encode(), blob.raw, 0o100644, st)
        index.save(target, scratch, never, fsync=False, skip_hash=False, split=policy)

    def libgit2() -> None:
        counter[0] += 1
        entry = pygit2.IndexEntry(f"bench/{counter[0]}.md", blob, pygit2.enums.FileMode.BLOB)
        libgit2_index.add(entry)
        libgit2_index.write()

    update(split_index, split_dir / "index", always)  # writes its base once
    try:
        return measure_interleaved(
            {
                "codec": lambda: update(fast_index, scratch / "codec-index", NO_SPLIT),
                "split": lambda: update(split_index, split_dir / "index", always),
                "libgit2": libgit2,
            },
            repeat=repeat,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def prepare(tmp: Path, size: int) -> Path:
    """The workspace of one size: ``jpfs init`` and ``size`` idle conversations."""
    root = make_workspace(tmp / "ws")
    if size:
        populate(root, size, 10)
    return root


def bench_size(root: Path, size: int, commits: int, threads: int, writes: int) -> dict[str, Any]:
    ws = open_workspace(root, search=False)
    events = bench_events(ws, commits)
    # What the set-up and the commits above wrote is flushed first, so that the
    # kernel's writeback of it does not compete with the writers.
    os.sync()
    create = bench_creates(ws, threads * writes)
    writers = bench_writers(ws, threads, writes)
    codec = bench_index_codec(ws, max(10, commits // 2))
    # raw/ holds the baseline's files (committed on its own branch).
    clean = git(ws.conv_root, "status", "--porcelain", "--", ".", ":!raw") == ""
    entries = len(git(ws.conv_root, "ls-files").splitlines())
    ws.committer.close(wait=True)
    short, long, raw = events["10 events"], events["1000 events"], events["raw plumbing"]
    return {
        "conversations": size,
        "index_entries": entries,
        "commit_10_events": short.to_json(),
        "commit_1000_events": long.to_json(),
        "raw_plumbing": raw.to_json(),
        "events_ratio": long.median / short.median,
        "single_writer_vs_raw": raw.median / short.median,
        "writers": {"threads": threads, "writes_each": writes, **writers},
        "file_create_s": create,
        "index_codec": codec["codec"].to_json(),
        "index_libgit2": codec["libgit2"].to_json(),
        "index_split": codec["split"].to_json(),
        "codec_speedup": codec["libgit2"].median / codec["codec"].median,
        "record_status_clean": clean,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--commits", type=int, default=None)
    parser.add_argument("--threads", type=int, default=50)
    parser.add_argument("--writes", type=int, default=None)
    parser.add_argument("--conversations", type=int, nargs="*", default=None)
    args = parser.parse_args(argv)
    commits = args.commits or (20 if args.quick else 40)
    writes = args.writes or (4 if args.quick else 10)
    sizes = args.conversations or ([100, 1000] if args.quick else [100, 1000, 10000])
    pin_environment()
    print_machine()
    # Every size's workspace is made before any is measured, so that all sizes meet
    # the file system in one state: measured between set-ups, the smaller sizes met
    # the inodes freed by whatever ran before the bench still quarantined (see
    # bench_creates), and the largest, after minutes of set-up, did not.
    with contextlib.ExitStack() as stack:
        roots = {n: prepare(stack.enter_context(temp_dir()), n) for n in sizes}
        results = {str(n): bench_size(roots[n], n, commits, args.threads, writes) for n in sizes}
    print_table(
        "record commits on the real runtime path (Runner.record_event: an event and its commit)",
        ["conversations", "10 events", "1000 events", "ratio (<= 1.5)", "raw plumbing",
         "raw / jpfs (>= 3)"],
        [
            [
                f"{n} ({r['index_entries']} files)",
                ms(r["commit_10_events"]["median_s"]),
                ms(r["commit_1000_events"]["median_s"]),
                f"{r['events_ratio']:.2f}x",
                ms(r["raw_plumbing"]["median_s"]),
                f"{r['single_writer_vs_raw']:.1f}x",
            ]
            for n, r in results.items()
        ],
    )  # fmt: skip
    print_table(
        f"{args.threads} concurrent writers x {writes} writes (group commit)",
        [
            "conversations",
            "writes/s (>= 500)",
            "p50",
            "p99 (<= 50 ms)",
            "p99, turns 2-",
            "status clean",
            "file creation (fs state)",
        ],
        [
            [
                n,
                f"{r['writers']['writes_per_s']:.0f}",
                ms(r["writers"]["p50_s"]),
                ms(r["writers"]["p99_s"]),
                ms(r["writers"]["p99_later_s"]),
                str(r["record_status_clean"]),
                f"{r['file_create_s'] * 1e6:.0f} us",
            ]
            for n, r in results.items()
        ],
    )
    print_table(
        "one index update of the record's index: jpfs's codec against libgit2",
        [
            "conversations",
            "codec, whole",
            "codec, split",
            "libgit2, whole",
            "libgit2 / codec (keep if >= 2)",
        ],
        [
            [
                n,
                ms(r["index_codec"]["median_s"]),
                ms(r["index_split"]["median_s"]),
                ms(r["index_libgit2"]["median_s"]),
                f"{r['codec_speedup']:.1f}x",
            ]
            for n, r in results.items()
        ],
    )
    return results


if __name__ == "__main__":
    main()
