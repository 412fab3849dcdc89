"""Benchmark the agent runtime's own overhead with a zero-latency scripted provider.

Usage: python bench/bench_runtime.py [--quick] [--runs N] [--cli-runs N] [--fanout-runs N]
                                     [--children K] [--tree N]

The ``zero`` profile answers with one text turn, instantly, onboarding off, so
everything measured is jpfs: creating the conversation, the runner's steps and the
commits each step makes.

* (a) in process: ``jpfs.services.run.query.query(ws, "hi", agent="zero")`` per call (median, p99;
  target: under 50 ms), split into create (the conversation and its first commit)
  and run (the runner's steps), and the time spent inside ``Committer.commit``;
* (b) the same through a subprocess:
  ``jpfs query --new --agent zero --non-interactive hi``, and the ratio (b)/(a);
* fan-out: a parent whose one scripted turn calls ``jp_query`` K=8 times (the
  children run in parallel threads), against K zero queries one after another
  (measured in alternation, so load on the machine hits both alike);
* (a) again after adding N conversations of 10 events (default 10,000; 1,000 with
  --quick; 0 skips it): what a query costs in a workspace that has been used.

``main(argv)`` returns the numbers as a dict for ``python -m bench``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    Stats,
    add_profile,
    command,
    git,
    jpfs_argv,
    make_workspace,
    measure,
    measure_interleaved,
    ms,
    pin_environment,
    populate,
    print_machine,
    print_table,
    ratio,
    temp_dir,
    use_bytecode_cache,
)

TARGET_S = 0.050

ZERO = """\
# Zero-latency scripted agent: one instant text turn. For benchmarks.
model = "script-zero"
provider = "script"
description = "Benchmark: answers 'ok' at once."

[onboarding]
enabled = false

[[script.turns]]
text = "ok: {input}"
"""


def fanout_profile(children: int) -> str:
    calls = ",\n".join(
        f'  {{ name = "jp_query", input = {{ config = "zero", query = "part {i}" }} }}'
        for i in range(children)
    )
    return f"""\
# Scripted parent: one turn delegating to {children} zero children at once. For benchmarks.
model = "script-fanout"
provider = "script"
description = "Benchmark: delegates to {children} children in one turn."

[tools]
allow = ["jp_query"]
agents = ["zero"]

[limits]
max_children = {children}

[onboarding]
enabled = false

[[script.turns]]
text = "Delegating."
tool_calls = [
{calls},
]

[[script.turns]]
text = "Done.\\n{{results}}"
"""


class Timer:
    """Accumulates the time spent inside a wrapped callable, and its calls."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0
                self.calls += 1

        return timed


def bench_in_process(ws_root: Path, runs: int) -> dict[str, Any]:
    """(a), with per-query medians of its parts: create, run, and time in commits."""
    from jpfs import api
    from jpfs.core.state import State
    from jpfs.core.workspace import open_workspace
    from jpfs.services.conversations import lifecycle
    from jpfs.services.run.query import query

    ws = open_workspace(ws_root, search=False)
    runner = api.runner(ws)
    timers = {"create": Timer(), "run": Timer(), "commit": Timer()}
    parts: dict[str, list[float]] = {name: [] for name in timers}
    commits: list[int] = []
    # Instrumented for the breakdown only; the wrappers cost microseconds.
    ws.committer.commit = timers["commit"].wrap(ws.committer.commit)  # type: ignore[method-assign]
    runner.run_locked = timers["run"].wrap(runner.run_locked)  # type: ignore[method-assign]
    original = lifecycle.new_conversation
    lifecycle.new_conversation = timers["create"].wrap(original)

    def one() -> None:
        before = {name: t.seconds for name, t in timers.items()}
        calls = timers["commit"].calls
        outcome = query(ws, "hi", agent="zero", runner=runner)
        if outcome.state is not State.IDLE or outcome.text.strip() != "ok: hi":
            raise RuntimeError(f"unexpected outcome {outcome}")
        for name, t in timers.items():
            parts[name].append(t.seconds - before[name])
        commits.append(timers["commit"].calls - calls)

    warmup = 3
    try:
        stats = measure(one, repeat=runs, warmup=warmup)
    finally:
        lifecycle.new_conversation = original
    medians = {f"{name}_s": Stats(tuple(v[warmup:])).median for name, v in parts.items()}
    return {"stats": stats, **medians, "commits_per_query": max(commits)}


def bench_subprocess(ws_root: Path, runs: int) -> tuple[Stats, Stats]:
    argv = jpfs_argv("query", "--new", "--agent", "zero", "--non-interactive", "hi")
    got = measure_interleaved(
        {"query": command(argv, ws_root), "help": command(jpfs_argv("--help"), ws_root)},
        repeat=runs,
    )
    return got["query"], got["help"]


def bench_fanout(ws_root: Path, runs: int, children: int) -> tuple[Stats, Stats, int]:
    """(K sequential zero queries, one parent fanning out to K, git commits per fan-out)."""
    from jpfs import api
    from jpfs.core.state import State
    from jpfs.core.workspace import open_workspace
    from jpfs.services.run.query import query

    ws = open_workspace(ws_root, search=False)

    def fanout() -> None:
        outcome = query(ws, "go", agent="fanout", runner=api.runner(ws))
        if outcome.state is not State.IDLE or outcome.text.count("<response") != children:
            raise RuntimeError(f"unexpected fan-out outcome {outcome.state}: {outcome.text[:200]}")

    def sequential() -> None:
        for i in range(children):
            if query(ws, f"part {i}", agent="zero", runner=api.runner(ws)).state is not State.IDLE:
                raise RuntimeError("a zero query did not finish")

    before = int(git(ws_root, "rev-list", "--count", "HEAD"))
    fanout()  # also the warm-up
    commits = int(git(ws_root, "rev-list", "--count", "HEAD")) - before
    sequential()
    got = measure_interleaved({"sequential": sequential, "fanout": fanout}, repeat=runs, warmup=0)
    return got["sequential"], got["fanout"], commits


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--runs", type=int, help="in-process queries timed (default 50)")
    parser.add_argument("--cli-runs", type=int, help="subprocess queries timed (default 20)")
    parser.add_argument("--fanout-runs", type=int, help="fan-out parents timed (default 10)")
    parser.add_argument("--children", type=int, default=8, help="children per fan-out")
    parser.add_argument("--tree", type=int, help="conversations for the large-workspace (a)")
    args = parser.parse_args(argv)
    runs = args.runs or (20 if args.quick else 50)
    cli_runs = args.cli_runs or (5 if args.quick else 20)
    fanout_runs = args.fanout_runs or (3 if args.quick else 10)
    tree_size = args.tree if args.tree is not None else (1000 if args.quick else 10_000)
    pin_environment()
    print_machine()
    with temp_dir() as tmp:
        use_bytecode_cache(tmp / "pycache")
        ws = make_workspace(tmp / "ws")
        add_profile(ws, "zero", ZERO)
        add_profile(ws, "fanout", fanout_profile(args.children))
        git(ws, "add", "-A")
        git(ws, "commit", "-q", "-m", "bench profiles")
        a = bench_in_process(ws, runs)
        b, helps = bench_subprocess(ws, cli_runs)
        seq, fan, fan_commits = bench_fanout(ws, fanout_runs, args.children)
        big: dict[str, Any] | None = None
        if tree_size:
            built = populate(ws, tree_size, 10)
            big = bench_in_process(ws, min(runs, 20))

    sa: Stats = a["stats"]
    ok = "ok" if sa.median < TARGET_S else "MISSED"
    print_table(
        f"one zero-latency sub-agent per query ({runs} in-process runs, {cli_runs} subprocess"
        f" runs; target: (a) < {TARGET_S * 1000:.0f} ms)",
        ["what", "median", "p99", "ratio"],
        [
            ["(a) query(ws, 'hi', agent='zero') in process", ms(sa.median), ms(sa.p99), ok],
            ["    create: conversation + first commit", ms(a["create_s"]), "", ""],
            ["    run: runner steps and their commits", ms(a["run_s"]), "", ""],
            [
                f"    inside Committer.commit ({a['commits_per_query']:.0f} calls)",
                ms(a["commit_s"]),
                "",
                "",
            ],
            [
                "(b) jpfs query --new --agent zero --non-interactive hi",
                ms(b.median),
                ms(b.p99),
                f"(b)/(a) {ratio(b.median, sa.median)}",
            ],
            ["    for reference: jpfs --help (start-up only)", ms(helps.median), ms(helps.p99), ""],
        ],
    )
    print_table(
        f"fan-out: a parent delegating to {args.children} children in one turn"
        f" (median of {fanout_runs})",
        ["what", "median", "p99", "vs sequential"],
        [
            [
                f"{args.children} zero queries one after another  (baseline)",
                ms(seq.median),
                ms(seq.p99),
                "1.00x",
            ],
            [
                f"parent + {args.children} children (jp_query, parallel threads)",
                ms(fan.median),
                ms(fan.p99),
                ratio(fan.median, seq.median),
            ],
            [
                f"    per child ({fan_commits} git commits per fan-out)",
                ms(fan.median / args.children),
                "",
                "",
            ],
        ],
    )
    if big is not None:
        sb: Stats = big["stats"]
        print_table(
            f"(a) as the workspace grows ({built.conversations:,} conversations x"
            f" {built.events} events = {built.files:,} more files; {len(sb.samples)} runs)",
            ["what", "median", "p99", "vs empty"],
            [
                ["(a) on the near-empty workspace above  (baseline)", ms(sa.median), "", "1.00x"],
                [
                    f"(a) with {built.conversations:,} conversations",
                    ms(sb.median),
                    ms(sb.p99),
                    f"{ratio(sb.median, sa.median)} {'ok' if sb.median < TARGET_S else 'MISSED'}",
                ],
                ["    create: conversation + first commit", ms(big["create_s"]), "", ""],
                ["    run: runner steps and their commits", ms(big["run_s"]), "", ""],
                [
                    f"    inside Committer.commit ({big['commits_per_query']:.0f} calls)",
                    ms(big["commit_s"]),
                    "",
                    "",
                ],
            ],
        )
    return {
        "large_workspace": None
        if big is None
        else {
            "conversations": tree_size,
            **big["stats"].to_json(),
            **{k: v for k, v in big.items() if k != "stats"},
        },
        "runs": {"in_process": runs, "subprocess": cli_runs, "fanout": fanout_runs},
        "in_process": {**sa.to_json(), **{k: v for k, v in a.items() if k != "stats"}},
        "subprocess": b.to_json(),
        "jpfs_help": helps.to_json(),
        "ratio_subprocess_vs_in_process": b.median / sa.median,
        "target_s": TARGET_S,
        "fanout": {
            "children": args.children,
            **fan.to_json(),
            "sequential": seq.to_json(),
            "ratio_vs_sequential": fan.median / seq.median,
            "commits": fan_commits,
        },
    }


if __name__ == "__main__":
    main(sys.argv[1:])
