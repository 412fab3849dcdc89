"""Benchmark jpfs.infra.committer against a raw git plumbing loop.

Usage: python bench/bench_commit.py [--files 10000] [--commits N] [--threads 50]
                                    [--writes K] [--quick]

Without --files it runs at 10k and 100k files. For each size it builds a temp repo whose
HEAD and index hold that many files (git fast-import + read-tree; the files are not
checked out, the committer never reads them), then measures:

* raw: ``hash-object -w``, ``update-index`` on a private index (GIT_INDEX_FILE),
  ``write-tree``, ``commit-tree``, ``update-ref NEW OLD`` per commit;
* single: one thread, write a file then ``Committer.commit`` (also updates the user's
  index);
* threads: T threads each writing its own file K times, committing after each write
  (group commit): committed writes/s and p50/p99 latency of ``commit()``.

``main(argv)`` returns the numbers as a dict for a bench runner.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jpfs.infra.committer import Change, Committer

_ENV = {
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
}


def _git(
    repo: Path, *args: str, data: bytes | None = None, env: dict[str, str] | None = None
) -> str:
    result = subprocess.run(
        ["git", *args],
        cwd=repo,
        input=data,
        capture_output=True,
        check=True,
        env={**os.environ, **_ENV, **(env or {})},
    )
    return result.stdout.decode().strip()


def build_repo(root: Path, files: int) -> Path:
    """A repo whose HEAD commit and index hold ``files`` files spread over 300 dirs."""
    repo = root / f"repo-{files}"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.name", "Bench")
    _git(repo, "config", "user.email", "bench@localhost")
    _git(repo, "config", "gc.auto", "0")  # keep background gc out of the timings
    parts = [b"commit refs/heads/main\ncommitter Bench <bench@localhost> 0 +0000\ndata 4\ninit\n"]
    for i in range(files):
        content = b"file %d\n" % i
        parts.append(
            b"M 100644 inline src/d%03d/f%d.txt\ndata %d\n%s\n"
            % (i % 300, i, len(content), content)
        )
    _git(repo, "fast-import", "--quiet", data=b"".join(parts))
    _git(repo, "read-tree", "HEAD")
    (repo / "conversations").mkdir()
    return repo


def bench_raw(repo: Path, commits: int) -> float:
    """Commits/s of the raw plumbing loop."""
    private = repo / ".git" / "bench-private-index"
    _git(repo, "read-tree", "HEAD", env={"GIT_INDEX_FILE": str(private)})
    env = {"GIT_INDEX_FILE": str(private)}
    target = repo / "conversations" / "raw"
    target.mkdir(exist_ok=True)
    start = time.perf_counter()
    for i in range(commits):
        rel = f"conversations/raw/m{i}.md"
        (repo / rel).write_text(f"raw message {i}\n")
        blob = _git(repo, "hash-object", "-w", rel)
        _git(repo, "update-index", "--add", "--cacheinfo", f"100644,{blob},{rel}", env=env)
        tree = _git(repo, "write-tree", env=env)
        old = _git(repo, "rev-parse", "HEAD")
        new = _git(repo, "commit-tree", tree, "-p", old, "-m", f"raw {i}")
        _git(repo, "update-ref", "refs/heads/main", new, old)
    elapsed = time.perf_counter() - start
    # Make HEAD's tree and the user's index agree again for the next phases.
    _git(repo, "read-tree", "HEAD")
    return commits / elapsed


def bench_single(repo: Path, commits: int) -> float:
    """Commits/s of one thread using the Committer."""
    target = repo / "conversations" / "single"
    target.mkdir(exist_ok=True)
    committer = Committer(repo, maintenance_every=0)
    try:
        committer.commit_pending()  # warm up: parses the index once
        start = time.perf_counter()
        for i in range(commits):
            (target / f"m{i}.md").write_text(f"single message {i}\n")
            change = Change(
                (f"conversations/single/m{i}.md",),
                "jpfs(single): message",
                (("Jpfs-Conversation", "single"), ("Jpfs-Event", "message")),
            )
            if committer.commit(change) is None:
                raise RuntimeError("bench commit changed nothing")
        return commits / (time.perf_counter() - start)
    finally:
        committer.close(wait=True)  # no background repack racing the next phase


def bench_threads(repo: Path, threads: int, writes: int) -> dict[str, float]:
    """Group commit under ``threads`` writers: writes/s and commit() latency."""
    latencies: list[float] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    committer = Committer(repo, maintenance_every=0)
    try:
        # Steady state, as in the long-running daemon: the first commit parses the index.
        warm = repo / "conversations" / "warmup.md"
        warm.write_text(f"warm {time.time()}\n")
        committer.commit(Change(("conversations/warmup.md",), "jpfs: warm up"))
        barrier = threading.Barrier(threads + 1)

        def writer(n: int) -> None:
            conv = f"t{n:02d}"
            directory = repo / "conversations" / conv
            directory.mkdir(exist_ok=True)
            mine: list[float] = []
            barrier.wait()
            try:
                for i in range(writes):
                    (directory / "log.md").write_text(f"thread {n} write {i}\n")
                    change = Change(
                        (f"conversations/{conv}/log.md",),
                        f"jpfs({conv}): event",
                        (("Jpfs-Conversation", conv), ("Jpfs-Event", "event")),
                    )
                    t0 = time.perf_counter()
                    committer.commit(change)
                    mine.append(time.perf_counter() - t0)
            except BaseException as exc:
                errors.append(exc)
            with lock:
                latencies.extend(mine)

        workers = [threading.Thread(target=writer, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        barrier.wait()
        start = time.perf_counter()
        for worker in workers:
            worker.join()
        elapsed = time.perf_counter() - start
    finally:
        committer.close(wait=True)  # no background repack racing fsck
    if errors:
        raise errors[0]
    latencies.sort()
    commits = int(_git(repo, "rev-list", "--count", "HEAD"))
    return {
        "writes_per_s": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1e3,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e3,
        "commits_total": float(commits),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, action="append", help="repo size (repeatable)")
    parser.add_argument("--commits", type=int, default=0, help="commits per single/raw run")
    parser.add_argument("--threads", type=int, default=50)
    parser.add_argument("--writes", type=int, default=20, help="writes per thread")
    parser.add_argument("--quick", action="store_true", help="10k files and fewer commits")
    args = parser.parse_args(argv)
    sizes = args.files or ([10_000] if args.quick else [10_000, 100_000])
    if args.quick:
        args.commits = args.commits or 20
        args.writes = min(args.writes, 10)
    results: dict[str, Any] = {}
    scratch = Path(tempfile.mkdtemp(prefix="jpfs-bench-"))
    try:
        for files in sizes:
            repo = build_repo(scratch, files)
            raw_commits = args.commits or (40 if files <= 20_000 else 20)
            single_commits = args.commits or (300 if files <= 20_000 else 100)
            raw = bench_raw(repo, raw_commits)
            single = bench_single(repo, single_commits)
            threaded = bench_threads(repo, args.threads, args.writes)
            fsck = subprocess.run(["git", "fsck"], cwd=repo, capture_output=True, check=False)
            if fsck.returncode:
                print(fsck.stderr.decode(errors="replace")[-2000:], file=sys.stderr)
            results[str(files)] = {
                "raw_commits_per_s": raw,
                "single_commits_per_s": single,
                "single_vs_raw": single / raw,
                **{f"threads_{k}": v for k, v in threaded.items()},
                "fsck_ok": fsck.returncode == 0,
            }
            shutil.rmtree(repo)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    _print_table(results, args.threads, args.writes)
    return results


def _print_table(results: dict[str, Any], threads: int, writes: int) -> None:
    print(
        f"{'files':>8} {'raw c/s':>9} {'single c/s':>11} {'ratio':>6} "
        f"{f'{threads}thr w/s':>10} {'p50 ms':>7} {'p99 ms':>7} {'commits':>8} {'fsck':>5}"
    )
    for files, r in results.items():
        print(
            f"{files:>8} {r['raw_commits_per_s']:>9.1f} {r['single_commits_per_s']:>11.1f} "
            f"{r['single_vs_raw']:>5.1f}x {r['threads_writes_per_s']:>10.1f} "
            f"{r['threads_p50_ms']:>7.1f} {r['threads_p99_ms']:>7.1f} "
            f"{int(r['threads_commits_total']):>8} {'ok' if r['fsck_ok'] else 'FAIL':>5}"
        )
    print(f"(threads: {threads} x {writes} writes; targets: ratio >= 3x, >= 500 w/s, p99 < 50 ms)")


if __name__ == "__main__":
    main()
