"""Benchmark the daemon: reaction latency, bursts, start-up and memory.

Usage: python bench/bench_daemon.py [--quick] [--tasks N] [--burst N] [--agents N]
       [--turn S] [--rounds R] [--tree N] [--only latency,burst,start]

Every number comes from a real ``jpfs daemon run`` process on a real repository
(:mod:`bench.daemonproc`):

* latency: a task.md saved (written in place) into an existing directory, until the
  agent's first provider request reaches a local HTTP server that speaks the Messages
  API (the ``anthropic`` provider through the real SDK). p50 and p99 over N tasks
  (default 200; targets: p50 under 100 ms, p99 under 500 ms). The path includes the
  debounce, committing the user's task.md, filling in conversation.toml, the first
  event and its commit. Baseline in the same run: a bare watchdog observer's time from
  the same write to its event callback. Also shown: a task.md written right after
  ``mkdir`` (no close event seen, so the edit waits ``daemon.settle``).
* burst: N tasks (default 60) saved at once into one daemon with ``daemon.max_agents``
  = 4 (``--agents``), until all are idle, against the same N saved one at a time (each
  saved once the previous one is idle) through the same daemon, interleaved round by
  round (``--rounds``). Target (issue "Scale"): burst / one at a time <= 0.5, 0.25
  ideal. The agent's model turn takes ``--turn`` seconds (default 0.2, a scripted
  delay: what concurrency can overlap); the same with a zero-latency agent shows what
  jpfs itself costs per conversation (CPU-bound: 4 agents cannot beat 2 cores).
* start: ``jpfs daemon run`` to ready (and to caught up) at 100 conversations and at
  N (default 10,000), a first start (no ``daemon-seen.json``) and a restart, the sizes
  interleaved round by round. Target: ready at N / ready at 100 <= 3. Then, at N: the
  daemon's RSS once ready, a full rescan (SIGHUP), a periodic one, and the RSS once a
  run has committed and after 200 more tasks (target <= 150 MB).

``main(argv)`` returns the numbers as a dict for ``python -m bench``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    Stats,
    add_profile,
    git,
    make_workspace,
    ms,
    pin_environment,
    populate,
    print_machine,
    print_table,
    ratio,
    stop_cleanly_on_sigterm,
    temp_dir,
    use_bytecode_cache,
)
from bench.daemonproc import (
    HTTP_AGENT,
    ZERO_AGENT,
    Arrivals,
    Daemon,
    messages_api,
    save,
    slow_agent,
    wait_idle,
)

# -- measurements -----------------------------------------------------------------------------


def bare_watchdog(root: Path, n: int) -> Stats:
    """Write -> closed-event callback of a plain watchdog observer (the floor)."""
    from watchdog.events import FileClosedEvent, FileSystemEventHandler
    from watchdog.observers import Observer

    seen: dict[str, float] = {}
    cond = threading.Condition()

    class Handler(FileSystemEventHandler):
        def on_closed(self, event: Any) -> None:
            with cond:
                seen[os.fsdecode(event.src_path)] = time.time()
                cond.notify_all()

    root.mkdir(parents=True)
    observer = Observer()
    observer.schedule(Handler(), str(root), recursive=True, event_filter=[FileClosedEvent])
    observer.start()
    samples = []
    try:
        for i in range(n):
            path = root / f"t{i}.md"
            t0 = save(path, "task\n")
            with cond:
                cond.wait_for(lambda p=str(path): p in seen, 10)
            samples.append(seen[str(path)] - t0)
    finally:
        observer.stop()
        observer.join()
    return Stats(tuple(samples))


def latency(base: Path, tasks: int, new_dir_tasks: int) -> dict[str, Stats]:
    arrivals = Arrivals()
    ws = make_workspace(base / "latency")
    add_profile(ws, "http", HTTP_AGENT)
    from jpfs.core.config import set_in_file

    set_in_file(ws / ".jpfs" / "config.toml", "conversations.default_agent", '"http"')
    root = ws / "conversations"
    ids = [f"t{i:03d}" for i in range(tasks)]
    for conv_id in ids:
        (root / conv_id).mkdir()
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "bench setup")
    out: dict[str, Stats] = {}
    with messages_api(arrivals) as url:
        daemon = Daemon(ws, {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "bench"})
        try:
            # One warm-up task: the first request imports and builds the SDK client.
            warm = root / "warmup"
            warm.mkdir()
            save(warm / "task.md", "Warm up.\n")
            arrivals.wait("warmup", 60)
            wait_idle(ws, ["warmup"], 60)
            samples = []
            for conv_id in ids:
                t0 = save(root / conv_id / "task.md", f"Task {conv_id}.\n")
                samples.append(arrivals.wait(conv_id) - t0)
                wait_idle(ws, [conv_id], 60)  # unloaded latency: one at a time
            out["existing_dir"] = Stats(tuple(samples))
            samples = []
            for i in range(new_dir_tasks):
                conv_id = f"n{i:03d}"
                (root / conv_id).mkdir()
                t0 = save(root / conv_id / "task.md", f"Task {conv_id}.\n")
                samples.append(arrivals.wait(conv_id) - t0)
                wait_idle(ws, [conv_id], 60)
            out["new_dir"] = Stats(tuple(samples))
        finally:
            daemon.stop()
    return out


def burst_workspace(base: Path, name: str, text: str, agents: int, ids: list[str]) -> Path:
    """A workspace whose default agent is ``text``, ``agents`` runs at once, and the
    directories of ``ids`` made before the daemon starts: the tasks are then saved into
    existing directories, as in the latency bench."""
    ws = make_workspace(base / f"burst-{name}")
    add_profile(ws, name, text)
    from jpfs.core.config import set_in_file

    config = ws / ".jpfs" / "config.toml"
    set_in_file(config, "conversations.default_agent", f'"{name}"')
    set_in_file(config, "daemon.max_agents", str(agents))
    for conv_id in ids:
        (ws / "conversations" / conv_id).mkdir()  # empty: nothing to commit
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "bench setup")
    return ws


def burst_vs_serial(
    base: Path, name: str, text: str, *, n: int, agents: int, rounds: int
) -> dict[str, Any]:
    """N tasks at once against the same N one at a time, one daemon, interleaved."""
    ids = {
        (kind, r): [f"{kind}{r}-{i:03d}" for i in range(n)]
        for r in range(rounds)
        for kind in ("burst", "serial")
    }
    ws = burst_workspace(base, name, text, agents, [c for group in ids.values() for c in group])
    root = ws / "conversations"
    samples: dict[str, list[float]] = {"burst": [], "serial": []}
    daemon = Daemon(ws)
    try:
        for r in range(rounds):
            # Alternate which goes first: a slower second half of the run hits both.
            for kind in ("burst", "serial") if r % 2 == 0 else ("serial", "burst"):
                group = ids[(kind, r)]
                started = time.monotonic()
                if kind == "burst":
                    for conv_id in group:
                        save(root / conv_id / "task.md", f"Job {conv_id}.\n")
                    wait_idle(ws, group, 600)
                else:
                    for conv_id in group:
                        save(root / conv_id / "task.md", f"Job {conv_id}.\n")
                        wait_idle(ws, [conv_id], 600)
                samples[kind].append(time.monotonic() - started)
    finally:
        daemon.stop()
    burst, serial = statistics.median(samples["burst"]), statistics.median(samples["serial"])
    return {
        "tasks": n,
        "agents": agents,
        "rounds": rounds,
        "burst_s": burst,
        "serial_s": serial,
        "ratio": burst / serial,
        "burst_samples_s": samples["burst"],
        "serial_samples_s": samples["serial"],
    }


_WAVES, _WAVE = 5, 40  # tasks after the first run, before the RSS "after 200 tasks"


def starts(base: Path, sizes: list[int], rounds: int) -> dict[str, Any]:
    """First start and restart, to ready and to caught up, at each size, interleaved;
    then RSS and scans at the largest."""
    workspaces = {}
    for n in sizes:
        ws = make_workspace(base / f"start-{n}")
        populate(ws, n, events=2)
        from jpfs.core.config import set_in_file

        set_in_file(ws / ".jpfs" / "config.toml", "daemon.scan_interval", "2")
        workspaces[n] = ws
    keys = ("first_ready", "first_caught_up", "restart_ready", "restart_caught_up")
    samples: dict[int, dict[str, list[float]]] = {n: {k: [] for k in keys} for n in sizes}
    for r in range(rounds):
        for n in sizes if r % 2 == 0 else list(reversed(sizes)):
            ws = workspaces[n]
            # A first start: no memory of what an earlier daemon saw.
            (ws / ".jpfs" / "local" / "daemon-seen.json").unlink(missing_ok=True)
            daemon = Daemon(ws)
            samples[n]["first_ready"].append(daemon.startup)
            samples[n]["first_caught_up"].append(daemon.caught_up)
            daemon.stop()
            daemon = Daemon(ws)
            samples[n]["restart_ready"].append(daemon.startup)
            samples[n]["restart_caught_up"].append(daemon.caught_up)
            daemon.stop()
    out: dict[str, Any] = {
        "rounds": rounds,
        "sizes": {str(n): {k: statistics.median(v) for k, v in samples[n].items()} for n in sizes},
        "samples": {str(n): samples[n] for n in sizes},
    }
    big = workspaces[sizes[-1]]
    add_profile(big, "zero", ZERO_AGENT)
    set_in_file(big / ".jpfs" / "config.toml", "conversations.default_agent", '"zero"')
    # With a key set, the daemon imports the model's SDK once caught up (for handed-over
    # queries): the memory measured after the run below includes it.
    daemon = Daemon(big, {"ANTHROPIC_API_KEY": "bench"})
    try:
        out["rss_mb"] = daemon.rss_mb()
        out["full_rescan_s"] = daemon.rescan_seconds()  # SIGHUP: reads every conversation
        scans = int(daemon.status().get("scans", 0))
        daemon.wait(lambda s: int(s.get("scans", 0)) > scans, 600, "scanned")
        out["periodic_scan_s"] = float(daemon.status().get("last_scan_s", float("nan")))
        # Ready is before any commit; a run's commits load the record's index (split
        # at this size), which the daemon then keeps, as it keeps the SDK: the memory of
        # a working daemon.
        probe = big / "conversations" / "rss-probe"
        probe.mkdir()
        save(probe / "task.md", "Probe.\n")
        wait_idle(big, ["rss-probe"], 600)
        log = big / ".jpfs" / "local" / "daemon.log"
        daemon.wait(lambda _: "SDKs loaded" in log.read_text(errors="replace"), 120, "SDK")
        out["rss_worked_mb"] = daemon.rss_mb()
        # And after 200 more tasks, in waves of 40: what a daemon holds once it has
        # worked a while (caches full, memory fragmented), not just after its first run.
        for wave in range(_WAVES):
            ids = [f"rss-wave-{wave}-{n}" for n in range(_WAVE)]
            for conv_id in ids:
                (big / "conversations" / conv_id).mkdir()
                save(big / "conversations" / conv_id / "task.md", f"Task {conv_id}.\n")
            wait_idle(big, ids, 600)
        out["rss_sustained_mb"] = daemon.rss_mb()
    finally:
        daemon.stop()
    empty = make_workspace(base / "start-empty")
    daemon = Daemon(empty)
    out["empty_rss_mb"] = daemon.rss_mb()
    daemon.stop()
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--tasks", type=int, default=None, help="latency samples (200)")
    parser.add_argument("--burst", type=int, default=60, help="tasks in a burst (60)")
    parser.add_argument("--agents", type=int, default=4, help="daemon.max_agents (4)")
    parser.add_argument("--turn", type=float, default=0.2, help="model turn, seconds (0.2)")
    parser.add_argument("--rounds", type=int, default=None, help="burst/start rounds (3)")
    parser.add_argument("--tree", type=int, default=None, help="largest start size (10,000)")
    parser.add_argument("--only", default="latency,burst,start", help="parts to run")
    args = parser.parse_args(argv)
    tasks = args.tasks or (50 if args.quick else 200)
    tree_size = args.tree or (2000 if args.quick else 10_000)
    rounds = args.rounds or (1 if args.quick else 3)
    parts = set(args.only.split(","))
    pin_environment()
    print_machine()
    results: dict[str, Any] = {}
    with temp_dir("jpfs-bench-daemon-") as base:
        use_bytecode_cache(base / "pycache")
        if "latency" in parts:
            results["latency"] = run_latency(base, tasks)
        if "burst" in parts:
            results["burst"] = run_bursts(base, args.burst, args.agents, args.turn, rounds)
        if "start" in parts:
            results["start"] = run_starts(base, sorted({100, tree_size}), rounds)
    return results


def run_latency(base: Path, tasks: int) -> dict[str, Any]:
    floor = bare_watchdog(base / "bare", tasks)
    lat = latency(base, tasks, new_dir_tasks=max(10, tasks // 10))
    rows = [
        ["bare watchdog: write -> event", ms(floor.p50), ms(floor.p99), "1.0x"],
        [
            "daemon: task.md saved -> provider request",
            ms(lat["existing_dir"].p50),
            ms(lat["existing_dir"].p99),
            ratio(lat["existing_dir"].p50, floor.p50),
        ],
        [
            "  same, written right after mkdir (settle)",
            ms(lat["new_dir"].p50),
            ms(lat["new_dir"].p99),
            ratio(lat["new_dir"].p50, floor.p50),
        ],
    ]
    print_table(f"reaction latency ({tasks} tasks)", ["path", "p50", "p99", "vs bare"], rows)
    return {
        "bare_watchdog": floor.to_json(),
        "task_saved_to_request": lat["existing_dir"].to_json(),
        "task_after_mkdir_to_request": lat["new_dir"].to_json(),
        "target": {"p50_s": 0.1, "p99_s": 0.5},
    }


def run_bursts(base: Path, n: int, agents: int, turn: float, rounds: int) -> dict[str, Any]:
    slow = burst_vs_serial(base, "slow", slow_agent(turn), n=n, agents=agents, rounds=rounds)
    zero = burst_vs_serial(base, "zero", ZERO_AGENT, n=n, agents=agents, rounds=rounds)
    ideal = n * turn / agents
    rows = [
        [
            f"model turn {turn * 1000:.0f} ms",
            f"{slow['serial_s']:.2f}s",
            f"{slow['burst_s']:.2f}s",
            f"{slow['ratio']:.2f}",
            f"{ideal:.2f}s ({ideal / slow['serial_s']:.2f})",
        ],
        [
            "zero-latency agent",
            f"{zero['serial_s']:.2f}s",
            f"{zero['burst_s']:.2f}s",
            f"{zero['ratio']:.2f}",
            "",
        ],
    ]
    print_table(
        f"burst: {n} tasks at once vs one at a time, one daemon, max_agents={agents}"
        f" (medians of {rounds}; target burst/one-at-a-time <= 0.5, 0.25 ideal)",
        ["agent", "one at a time", "burst", "burst / one at a time", "ideal burst"],
        rows,
    )
    return {"turn_s": turn, "slow": slow, "zero": zero, "ideal_burst_s": ideal}


def run_starts(base: Path, sizes: list[int], rounds: int) -> dict[str, Any]:
    st = starts(base, sizes, rounds)
    small = st["sizes"][str(sizes[0])]
    rows = []
    for n in sizes:
        s = st["sizes"][str(n)]
        rows.append(
            [
                f"{n:,}",
                f"{s['first_ready']:.2f}s ({s['first_caught_up']:.2f}s)",
                ratio(s["first_ready"], small["first_ready"]),
                f"{s['restart_ready']:.2f}s ({s['restart_caught_up']:.2f}s)",
                ratio(s["restart_ready"], small["restart_ready"]),
            ]
        )
    print_table(
        f"daemon start (medians of {rounds}; target ready at {sizes[-1]:,} / at {sizes[0]:,} <= 3)",
        [
            "conversations",
            "1st start: ready (caught up)",
            "vs smallest",
            "restart: ready (caught up)",
            "vs smallest",
        ],
        rows,
    )
    print_table(
        f"daemon at {sizes[-1]:,} conversations",
        [
            "RSS ready",
            "after a run",
            f"after {_WAVES * _WAVE} tasks",
            "empty tree RSS",
            "full scan",
            "periodic scan",
        ],
        [
            [
                f"{st['rss_mb']:.1f} MB",
                f"{st['rss_worked_mb']:.1f} MB",
                f"{st['rss_sustained_mb']:.1f} MB",
                f"{st['empty_rss_mb']:.1f} MB",
                f"{st['full_rescan_s']:.2f}s",
                f"{st['periodic_scan_s']:.2f}s",
            ]
        ],
    )
    return st


if __name__ == "__main__":
    stop_cleanly_on_sigterm()
    main()
