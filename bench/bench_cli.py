"""Benchmark the read-only CLI: start-up, ``conversation ls`` and ``conversation grep``.

Usage: python bench/bench_cli.py [--quick] [--conversations N] [--events M] [--repeat R]
                                  [--repeat-tree R]

Builds a workspace of N conversations (default 10,000; 1,000 with --quick) of M events
each (groups of ten: a top-level conversation and nine sub-agents), then times, as
subprocesses started with this interpreter (median of R runs after a warm-up; the
commands on the full tree take seconds each, so they run --repeat-tree times):

* start-up: ``jpfs conversation ls`` on an EMPTY workspace against
  ``python -c 'import typer'`` (target: within 1.5x);
* ``jpfs conversation ls --format json`` on the full tree (and ``tree.listing``
  in process, for reference);
* ``jpfs conversation grep P`` against ``git grep P`` on the conversation root, for a
  pattern with a few hundred matches and one with none (target: within 1.2x); plus
  the ``git grep`` jpfs actually runs (same flags; and with ``--untracked``, for
  reference), ``jpfs.services.views.search.grep`` in process, the scan for files not
  committed (``jpfs.infra.git.untracked``, its cache warm, against the ``git ls-files -o``
  it replaced) and the CLI with that cache deleted before each run (cold);
* the CLI right after git run by hand rewrote the index (the cache keeps its
  directories' stamps, not what it knew of untracked files);
* that scan after the committer wrote into 10, 100 and 1,000 conversations, against
  none: its cost grows with what changed.

``main(argv)`` returns the numbers as a dict for ``python -m bench``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    ABSENT,
    NEEDLE,
    Stats,
    command,
    jpfs_argv,
    make_workspace,
    measure_interleaved,
    ms,
    pin_environment,
    populate,
    print_machine,
    print_table,
    ratio,
    run_command,
    temp_dir,
    use_bytecode_cache,
)

STARTUP_TARGET = 1.5
GREP_TARGET = 1.2
GREP_TARGET_FILES = 100_000  # #15: "c grep over 100k+ files"; below, start-up dominates


def verdict(value: float, baseline: float, target: float) -> str:
    return "ok" if value <= baseline * target else "MISSED"


def bench_startup(empty: Path, repeat: int) -> dict[str, Any]:
    got = measure_interleaved(
        {
            "python": command([sys.executable, "-c", "pass"], empty),
            "typer": command([sys.executable, "-c", "import typer"], empty),
            "help": command(jpfs_argv("--help"), empty),
            "ls": command(jpfs_argv("conversation", "ls", "--format", "json"), empty),
        },
        repeat=repeat,
    )
    python, typer, help_, ls = got["python"], got["typer"], got["help"], got["ls"]
    base = typer.median
    print_table(
        f"start-up (empty workspace; median of {repeat}; target: ls <= {STARTUP_TARGET}x typer)",
        ["command", "median", "p99", "vs typer"],
        [
            ["python -c pass", ms(python.median), ms(python.p99), ratio(python.median, base)],
            ["python -c 'import typer'  (baseline)", ms(base), ms(typer.p99), "1.00x"],
            ["jpfs --help", ms(help_.median), ms(help_.p99), ratio(help_.median, base)],
            [
                "jpfs conversation ls --format json",
                ms(ls.median),
                ms(ls.p99),
                f"{ratio(ls.median, base)} {verdict(ls.median, base, STARTUP_TARGET)}",
            ],
        ],
    )
    return {
        "python_pass": python.to_json(),
        "import_typer": typer.to_json(),
        "jpfs_help": help_.to_json(),
        "jpfs_ls_empty": ls.to_json(),
        "ratio": ls.median / base,
        "target": STARTUP_TARGET,
    }


def bench_ls(ws: Path, conversations: int, repeat: int, startup: float) -> dict[str, Any]:
    from jpfs.core import tree
    from jpfs.core.workspace import open_workspace

    conv_root = open_workspace(ws, search=False).conv_root
    listed = len(tree.listing(conv_root))
    if listed != conversations:
        raise RuntimeError(f"listing saw {listed} conversations, expected {conversations}")
    from jpfs.core.conversation import Conversation

    ids = list(tree.walk(conv_root))
    got = measure_interleaved(
        {
            "sub": command(jpfs_argv("conversation", "ls", "--format", "json"), ws),
            "inproc": lambda: tree.listing(conv_root),
            # Where listing's time goes: finding the ids, then parsing conversation.toml.
            "walk": lambda: list(tree.walk(conv_root)),
            "meta": lambda: [Conversation(conv_root, i).summary() for i in ids],
        },
        repeat=repeat,
        warmup=0,  # the check above has read the tree once
    )
    sub, inproc, walk, meta = got["sub"], got["inproc"], got["walk"], got["meta"]
    per = sub.median / conversations * 1e6

    def share(s: Stats) -> str:
        return f"{s.median / inproc.median:.0%} of listing"

    print_table(
        f"conversation ls, {conversations:,} conversations (median of {repeat})",
        ["what", "median", "p99", "per conversation"],
        [
            ["jpfs ls on the empty workspace (start-up)", ms(startup), "", ""],
            ["jpfs conversation ls --format json", ms(sub.median), ms(sub.p99), f"{per:.0f} us"],
            [
                "tree.listing() in process",
                ms(inproc.median),
                ms(inproc.p99),
                f"{inproc.median / conversations * 1e6:.0f} us",
            ],
            ["  of which tree.walk() (the ids)", ms(walk.median), ms(walk.p99), share(walk)],
            ["  of which conversation.toml (summary)", ms(meta.median), ms(meta.p99), share(meta)],
        ],
    )
    return {
        "conversations": conversations,
        "jpfs_ls_json": sub.to_json(),
        "listing_in_process": inproc.to_json(),
        "walk_in_process": walk.to_json(),
        "meta_parse_in_process": meta.to_json(),
        "per_conversation_us": per,
    }


def bench_grep(ws: Path, repeat: int, expected: int, files: int) -> dict[str, Any]:
    from jpfs.core.workspace import open_workspace
    from jpfs.infra.git import untracked as scan
    from jpfs.services.views import search

    workspace = open_workspace(ws, search=False)
    record = workspace.conv_root  # the record worktree: git runs there, on its branch
    local = workspace.local_dir  # where the CLI keeps its caches, as here

    def cold(pattern: str) -> bytes:
        (local / scan.FILE).unlink(missing_ok=True)
        return run_command(jpfs_argv("conversation", "grep", pattern), ws, ok=(0, 1))

    out: dict[str, Any] = {}
    rows = []
    for label, pattern, want in (
        ("few hundred matches", NEEDLE, expected),
        ("no match", ABSENT, 0),
    ):
        found = len(search.grep(record, pattern, cache_dir=local))
        if found != want:
            raise RuntimeError(f"jpfs grep {pattern!r} found {found} matches, expected {want}")
        # What search.grep runs (binary files skipped, NUL-separated), and the same with
        # --untracked, which search.grep used to pass: it makes git walk the whole tree.
        same = ["git", "grep", "-I", "-n", "-z", "-F", "-e", pattern, "--"]
        same += [".", ":(exclude,glob)**/conversation.toml"]
        untracked = [*same[:2], "--untracked", *same[2:]]
        got = measure_interleaved(
            {
                "git": command(["git", "grep", "-n", pattern, "--", "."], record, ok=(0, 1)),
                "same": command(same, record, ok=(0, 1)),
                "untracked": command(untracked, record, ok=(0, 1)),
                "jpfs": command(jpfs_argv("conversation", "grep", pattern), ws, ok=(0, 1)),
                "inproc": lambda p=pattern: search.grep(record, p, cache_dir=local),  # type: ignore[misc]
                "others": command(["git", "ls-files", "-z", "-o", "--exclude-standard"], record),
                "scan": lambda: scan.untracked(record, cache_dir=local),
                "cold": lambda p=pattern: cold(p),  # type: ignore[misc]
            },
            repeat=repeat,
        )
        git_plain, git_same, jpfs, inproc = got["git"], got["same"], got["jpfs"], got["inproc"]
        base = git_plain.median

        def row(name: str, s: Stats, mark: str = "", base: float = base) -> list[str]:
            return [f"  {name}", ms(s.median), ms(s.p99), f"{ratio(s.median, base)}{mark}"]

        rows += [
            [f"{label} ({want})", "", "", ""],
            row("git -C conversations grep -n P  (baseline)", git_plain),
            row("git grep -I -z -F ... (what jpfs runs)", git_same),
            row("  the same with --untracked", got["untracked"]),
            row(
                "jpfs conversation grep P",
                jpfs,
                f" {verdict(jpfs.median, base, GREP_TARGET)}"
                if files >= GREP_TARGET_FILES
                else f" (target at {GREP_TARGET_FILES:,}+ files)",
            ),
            row("jpfs.services.views.search.grep() in process", inproc),
            row("  of which, beside git grep: the untracked scan", got["scan"]),
            row("  git ls-files -o, the scan it replaced", got["others"]),
            row("jpfs conversation grep P, its cache cold", got["cold"]),
        ]
        out[label.replace(" ", "_")] = {
            "pattern": pattern,
            "matches": want,
            "git_grep": git_plain.to_json(),
            "git_grep_jpfs_flags": git_same.to_json(),
            "git_grep_jpfs_flags_untracked": got["untracked"].to_json(),
            "jpfs_grep": jpfs.to_json(),
            "search_grep_in_process": inproc.to_json(),
            "untracked_scan_warm": got["scan"].to_json(),
            "git_ls_files_others": got["others"].to_json(),
            "jpfs_grep_cache_cold": got["cold"].to_json(),
            "ratio": jpfs.median / base,
        }
    print_table(
        f"conversation grep (median of {repeat}; target: jpfs <= {GREP_TARGET}x git grep)",
        ["command", "median", "p99", "vs git grep"],
        rows,
    )
    out["target"] = GREP_TARGET
    return out


def bench_after_git(ws: Path, repeat: int) -> dict[str, Any]:
    """``jpfs conversation grep`` right after git run by hand rewrote the record's index
    (untimed: ``git rm --cached`` and ``git reset`` of one file), alternating with runs
    on a cache that holds, and ``git grep``: the cache keeps its directories' stamps."""
    import time

    from jpfs.core.workspace import open_workspace

    record = open_workspace(ws, search=False).conv_root
    some = next(record.glob("*/task.md")).relative_to(record).as_posix()
    grep = jpfs_argv("conversation", "grep", NEEDLE)
    samples: dict[str, list[float]] = {"git": [], "warm": [], "after": []}
    for _ in range(repeat):
        for name in ("git", "warm", "after"):
            if name == "after":
                run_command(["git", "rm", "-q", "--cached", some], record)
                run_command(["git", "reset", "-q", "--", some], record)
            argv, cwd = (
                (["git", "grep", "-n", NEEDLE, "--", "."], record) if name == "git" else (grep, ws)
            )
            start = time.perf_counter()
            run_command(argv, cwd, ok=(0, 1))
            samples[name].append(time.perf_counter() - start)
    stats = {k: Stats(tuple(v)) for k, v in samples.items()}
    base = stats["git"].median
    print_table(
        f"conversation grep after git rewrote the index (median of {repeat})",
        ["command", "median", "p99", "vs git grep"],
        [
            ["git grep -n P  (baseline)", ms(base), ms(stats["git"].p99), "1.00x"],
            [
                "jpfs conversation grep P, cache holds",
                ms(stats["warm"].median),
                ms(stats["warm"].p99),
                ratio(stats["warm"].median, base),
            ],
            [
                "jpfs conversation grep P, after git wrote the index",
                ms(stats["after"].median),
                ms(stats["after"].p99),
                ratio(stats["after"].median, base),
            ],
        ],
    )
    return {k: v.to_json() for k, v in stats.items()}


def bench_scan_changes(ws: Path, repeat: int) -> dict[str, Any]:
    """The untracked scan (its cache warm) after the committer wrote an event into N
    conversations, as a busy daemon does: what it re-lists grows with N, not the tree."""
    import time

    from jpfs.core.workspace import open_workspace
    from jpfs.infra.committer import Change
    from jpfs.infra.git import untracked as scan

    workspace = open_workspace(ws, search=False)
    record, local = workspace.conv_root, workspace.local_dir
    tops = sorted(p.name for p in record.iterdir() if p.is_dir() and p.name != ".git")
    scan.untracked(record, cache_dir=local)
    made, base = 0, 0.0
    rows: list[list[str]] = []
    out: dict[str, Any] = {}
    for n in (0, 10, 100, 1000):
        samples = []
        for _ in range(repeat):
            for conv in tops[:n]:
                made += 1
                path = f"{workspace.conv_root_rel}/{conv}/events/{9000 + made:05d}-user.md"
                workspace.commit(Change((path,), "bench: an event", creates=((path, "x\n"),)))
            start = time.perf_counter()
            found = scan.untracked(record, cache_dir=local)
            samples.append(time.perf_counter() - start)
            if found:
                raise RuntimeError(f"the scan found {len(found)} untracked files, expected none")
        stats = Stats(tuple(samples))
        base = base or stats.median
        out[str(n)] = stats.to_json()
        rows.append([f"{n:,}", ms(stats.median), ms(stats.p99), ratio(stats.median, base)])
    print_table(
        f"untracked scan after N conversations committed into (median of {repeat})",
        ["conversations changed", "median", "p99", "vs none changed"],
        rows,
    )
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 conversations, fewer runs")
    parser.add_argument("--conversations", type=int, help="tree size (default 10,000)")
    parser.add_argument("--events", type=int, default=10, help="events per conversation")
    parser.add_argument("--repeat", type=int, help="timed start-up runs (default 10)")
    parser.add_argument("--repeat-tree", type=int, help="timed runs on the tree (default 5)")
    args = parser.parse_args(argv)
    conversations = args.conversations or (1000 if args.quick else 10_000)
    repeat = args.repeat or (5 if args.quick else 10)
    repeat_tree = args.repeat_tree or 5
    pin_environment()
    print_machine()
    with temp_dir() as tmp:
        use_bytecode_cache(tmp / "pycache")
        empty = make_workspace(tmp / "empty")
        startup = bench_startup(empty, repeat)
        ws = make_workspace(tmp / "full")
        tree = populate(ws, conversations, args.events)
        print(
            f"\n(built {tree.conversations:,} conversations x {tree.events} events ="
            f" {tree.files:,} files in {tree.build_seconds:.1f} s)"
        )
        ls = bench_ls(ws, conversations, repeat_tree, startup["jpfs_ls_empty"]["median_s"])
        grep = bench_grep(ws, repeat_tree, tree.needle_matches, tree.files)
        after_git = bench_after_git(ws, repeat_tree)
        changes = bench_scan_changes(ws, repeat_tree)
    return {
        "sizes": {"conversations": conversations, "events": args.events, "files": tree.files},
        "repeat": {"startup": repeat, "tree": repeat_tree},
        "startup": startup,
        "ls": ls,
        "grep": grep,
        "grep_after_git_wrote_the_index": after_git,
        "scan_after_changes": changes,
    }


if __name__ == "__main__":
    main(sys.argv[1:])
