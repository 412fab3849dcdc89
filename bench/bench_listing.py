"""Benchmark listings at 100, 1,000 and 10,000 conversations: ``jpfs conversation ls``
and ``jpfs tree``, against ``git ls-files`` plus ``python -c 'import typer'``.

Usage: python bench/bench_listing.py [--quick] [--sizes N,N,...] [--repeat R]

For each size: a workspace of N idle conversations of 10 events (bench.common.populate),
then, as subprocesses started with this interpreter and interleaved round by round
(every command of every size in each round):

* the baseline: ``git ls-files`` in the record worktree and ``python -c 'import typer'``
  (their sum: what listing N conversations with a typer CLI cannot beat by much);
* ``jpfs conversation ls`` and ``jpfs tree``, each after one untimed run (the cached
  summaries of ``.jpfs/local`` are warm, as they are for a user who lists twice);
* the same after one conversation changed (a new event), to show that the cost follows
  what changed, not the record's size;
* the first, cold run (no cache), once.

Targets (issue "Scale"): ``ls`` at 10,000 within 3x of ``ls`` at 100, and within 4x of
the baseline. ``main(argv)`` returns the numbers for ``python -m bench``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    command,
    jpfs_argv,
    make_workspace,
    measure_interleaved,
    ms,
    populate,
    print_table,
    ratio,
    run_command,
    temp_dir,
)


def touch_one(ws: Path) -> None:
    """One conversation changes: a new event, as a run would write it."""
    from jpfs.core.conversation import Conversation

    conv_root = ws / "conversations"
    first = sorted(p.name for p in conv_root.iterdir() if p.is_dir() and p.name != ".git")[0]
    Conversation(conv_root, first).append_event("user", f"more at {time.time()}\n")


def bench_sizes(root: Path, sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    """Every size's workspace first, then every command of every size in the same
    rounds: the ratio between sizes is as robust to a burst of load as the one to the
    baseline."""
    workspaces = {}
    cold: dict[int, dict[str, float]] = {}
    for n in sizes:
        ws = make_workspace(root / f"ws{n}")
        populate(ws, n, 10)
        workspaces[n] = ws
        cold[n] = {}
        for name, argv in (("ls", jpfs_argv("c", "ls")), ("tree", jpfs_argv("tree"))):
            t0 = time.perf_counter()
            run_command(argv, ws)
            cold[n][name] = time.perf_counter() - t0
    fns = {}
    for n, ws in workspaces.items():
        fns[f"git ls-files {n}"] = command(["git", "ls-files"], ws / "conversations")
        fns[f"import typer {n}"] = command([sys.executable, "-c", "import typer"], ws)
        fns[f"jpfs c ls {n}"] = command(jpfs_argv("c", "ls"), ws)
        fns[f"jpfs tree {n}"] = command(jpfs_argv("tree"), ws)
    stats = measure_interleaved(fns, repeat=repeat)
    results = []
    for n, ws in workspaces.items():
        changed = {}
        for name, argv in (("ls", jpfs_argv("c", "ls")), ("tree", jpfs_argv("tree"))):
            samples = []
            for _ in range(max(3, repeat // 2)):
                touch_one(ws)
                t0 = time.perf_counter()
                run_command(argv, ws)
                samples.append(time.perf_counter() - t0)
            changed[name] = sorted(samples)[len(samples) // 2]
        base = stats[f"git ls-files {n}"].median + stats[f"import typer {n}"].median
        results.append(
            {
                "conversations": n,
                "baseline_s": base,
                "git_ls_files_s": stats[f"git ls-files {n}"].median,
                "import_typer_s": stats[f"import typer {n}"].median,
                "ls_s": stats[f"jpfs c ls {n}"].median,
                "tree_s": stats[f"jpfs tree {n}"].median,
                "ls_one_changed_s": changed["ls"],
                "tree_one_changed_s": changed["tree"],
                "ls_cold_s": cold[n]["ls"],
                "tree_cold_s": cold[n]["tree"],
            }
        )
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 and 1,000 only")
    parser.add_argument("--sizes", help="comma-separated sizes (default 100,1000,10000)")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    sizes = [100, 1000] if args.quick else [100, 1000, 10000]
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    with temp_dir() as root:
        results = bench_sizes(root, sizes, args.repeat)
    small = results[0]
    rows = []
    for r in results:
        rows.append(
            [
                f"{r['conversations']:,}",
                ms(r["baseline_s"]),
                f"{ms(r['ls_s'])} ({ratio(r['ls_s'], r['baseline_s'])})",
                ratio(r["ls_s"], small["ls_s"]),
                ms(r["ls_one_changed_s"]),
                ms(r["ls_cold_s"]),
                f"{ms(r['tree_s'])} ({ratio(r['tree_s'], r['baseline_s'])})",
                ratio(r["tree_s"], small["tree_s"]),
                ms(r["tree_one_changed_s"]),
                ms(r["tree_cold_s"]),
            ]
        )
    print_table(
        "Listings (warm cache; baseline = git ls-files + python -c 'import typer')",
        [
            "conversations",
            "baseline",
            "c ls (x baseline)",
            f"ls / ls at {small['conversations']:,}",
            "ls, 1 changed",
            "ls cold",
            "tree (x baseline)",
            "tree / tree at smallest",
            "tree, 1 changed",
            "tree cold",
        ],
        rows,
    )
    return {"sizes": results}


if __name__ == "__main__":
    main(sys.argv[1:])
