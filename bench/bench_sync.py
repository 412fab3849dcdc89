"""Benchmark many machines on one git remote: throughput with 1, 2 and 3 daemons, lease
takeover latency, sync lag.

Usage: python bench/bench_sync.py [--quick] [--conversations N] [--turn S]

Everything is the real runtime path: a bare repository as the remote, one clone per
daemon (real ``jpfs daemon start`` processes, ``sync.remote = "origin"``), a writer
clone without a daemon that creates the conversations and sends them with
``jpfs sync``, and the real anthropic SDK talking to ``tests/messages_server.py``,
whose model takes ``--turn`` seconds (0.2) per answer so that agents overlap as with a
real model.

* throughput: N conversations (300) from one ``jpfs sync`` until the remote's record
  holds every ``result.md``; with 1, 2 and 3 daemons (4 agents each); the scaling
  ratio is each throughput over the one-daemon throughput measured in the same run.
* takeover: a daemon is SIGKILLed while its model call hangs; the time from the kill
  to the surviving daemon's model request for the same conversation (the lease is 3 s).
* sync lag: a file written in one daemon clone's conversation, until it appears in the
  other daemon clone's worktree (commit, push, fetch, merge); p50/p99.

``main(argv)`` returns the numbers as a dict for ``python -m bench``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    git,
    jpfs_argv,
    percentile,
    pin_environment,
    print_machine,
    print_table,
    run_command,
    temp_dir,
    use_bytecode_cache,
)

AGENT = """\
model = "claude-bench"
provider = "anthropic"
[onboarding]
enabled = false
"""
LEASE = 3.0
INTERVAL = 0.3


def jpfs(cwd: Path, *args: str, env: dict[str, str] | None = None) -> bytes:
    proc = subprocess.run(
        jpfs_argv(*args), cwd=cwd, capture_output=True, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"jpfs {' '.join(args)} in {cwd}: {proc.stderr.decode()}")
    return proc.stdout


def setup(base: Path, daemons: int) -> tuple[Path, list[Path], Path]:
    base.mkdir(parents=True)
    remote = base / "remote.git"
    git(base, "init", "-q", "--bare", "-b", "main", str(remote))
    seed = base / "seed"
    git(base, "clone", "-q", str(remote), str(seed))
    (seed / "README.md").write_text("# bench\n", encoding="utf-8")
    git(seed, "add", "README.md")
    git(seed, "commit", "-q", "-m", "initial")
    jpfs(seed, "init")
    (seed / ".jpfs" / "agents" / "bench.toml").write_text(AGENT, encoding="utf-8")
    for key, value in [
        ("conversations.default_agent", "bench"),
        ("agents.allowed", '["bench"]'),
        ("sync.remote", "origin"),
        ("sync.interval", str(INTERVAL)),
        ("sync.lease", str(LEASE)),
    ]:
        jpfs(seed, "config", "set", key, value)
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "bench setup")
    git(seed, "push", "-q", "origin", "main")
    jpfs(seed, "sync")
    clones = []
    for i in range(daemons):
        path = base / f"d{i + 1}"
        git(base, "clone", "-q", str(remote), str(path))
        clones.append(path)
    writer = base / "writer"
    git(base, "clone", "-q", str(remote), str(writer))
    return remote, clones, writer


def start(ws: Path, url: str) -> int:
    jpfs(ws, "daemon", "start", env={"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": ws.name})
    return int((ws / ".jpfs" / "local" / "daemon.pid").read_text(encoding="utf-8"))


def stop(ws: Path) -> None:
    subprocess.run(
        jpfs_argv("daemon", "stop", "--force", "--timeout", "30"), cwd=ws, capture_output=True
    )


def results_on(remote: Path) -> int:
    out = run_command(["git", "ls-tree", "-r", "--name-only", "jpfs-record"], remote)
    return sum(1 for line in out.decode().splitlines() if line.endswith("/result.md"))


def wait(predicate: Any, timeout: float, what: str, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    tick = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        tick.wait(every)


def throughput(base: Path, server: Any, daemons: int, count: int) -> float:
    remote, clones, writer = setup(base, daemons)
    try:
        for ws in clones:
            start(ws, server.url)
        for i in range(count):
            conv = writer / "conversations" / f"t-{i:04d}"
            conv.mkdir(parents=True)
            (conv / "task.md").write_text(f"# Task {i}\n\nSay hello.\n", encoding="utf-8")
        t0 = time.perf_counter()
        jpfs(writer, "sync")
        wait(lambda: results_on(remote) >= count, 900, f"{count} results", every=0.2)
        return time.perf_counter() - t0
    finally:
        for ws in clones:
            stop(ws)


def takeover(base: Path, server: Any) -> float:
    """Seconds from SIGKILL of a daemon in a model call to the survivor's same call."""
    from tests.messages_server import text_reply

    _remote, clones, writer = setup(base, 2)
    gate = threading.Event()
    calls: list[float] = []

    def respond(request: dict[str, Any]) -> Any:
        calls.append(time.perf_counter())
        if len(calls) == 1:
            gate.wait(60)  # the first holder's call hangs until it is dead
        return text_reply("Done.")

    server.responder = respond
    try:
        pid = start(clones[0], server.url)
        (writer / "conversations" / "slow").mkdir(parents=True)
        (writer / "conversations" / "slow" / "task.md").write_text("# Slow\n", encoding="utf-8")
        jpfs(writer, "sync")
        wait(lambda: len(calls) >= 1, 60, "the first daemon's model call")
        start(clones[1], server.url)
        killed = time.perf_counter()
        os.kill(pid, signal.SIGKILL)
        wait(lambda: len(calls) >= 2, 120, "the takeover's model call", every=0.01)
        return calls[1] - killed
    finally:
        gate.set()
        for ws in clones:
            stop(ws)


def lag(base: Path, server: Any, samples: int) -> list[float]:
    remote, clones, writer = setup(base, 2)
    a, b = clones
    try:
        for ws in clones:
            start(ws, server.url)
        (writer / "conversations" / "notes").mkdir(parents=True)
        (writer / "conversations" / "notes" / "task.md").write_text("# Notes\n", encoding="utf-8")
        jpfs(writer, "sync")
        wait(lambda: results_on(remote) >= 1, 60, "the notes conversation to finish")
        wait(lambda: (b / "conversations" / "notes" / "result.md").exists(), 60, "b to see it")
        out = []
        for i in range(samples):
            name = f"note-{i}.md"
            t0 = time.perf_counter()
            (a / "conversations" / "notes" / "files").mkdir(exist_ok=True)
            (a / "conversations" / "notes" / "files" / name).write_text(f"{i}\n", encoding="utf-8")
            target = b / "conversations" / "notes" / "files" / name
            wait(target.exists, 60, f"{name} to reach the other clone", every=0.005)
            out.append(time.perf_counter() - t0)
        return out
    finally:
        for ws in clones:
            stop(ws)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--conversations", type=int, default=None, help="conversations (300)")
    parser.add_argument("--turn", type=float, default=0.2, help="model turn, seconds (0.2)")
    parser.add_argument("--samples", type=int, default=None, help="sync lag samples (30)")
    args = parser.parse_args(argv)
    count = args.conversations or (60 if args.quick else 300)
    samples = args.samples or (10 if args.quick else 30)
    pin_environment()
    print_machine()
    from tests.messages_server import MessagesServer, text_reply

    results: dict[str, Any] = {"conversations": count, "turn_s": args.turn}
    with temp_dir("jpfs-bench-sync-") as base, MessagesServer() as server:
        use_bytecode_cache(base / "pycache")
        turn = args.turn
        server.responder = lambda request: (time.sleep(turn), text_reply("Done."))[1]
        rows = []
        took: dict[int, float] = {}
        for daemons in (1, 2, 3):
            took[daemons] = throughput(base / f"tp{daemons}", server, daemons, count)
            rate = count / took[daemons]
            ideal = count * turn / (4 * daemons)
            rows.append(
                [
                    daemons,
                    f"{took[daemons]:.1f} s",
                    f"{rate:.1f}/s",
                    f"{took[1] / took[daemons]:.2f}x",
                    f"{ideal:.1f} s",
                ]
            )
        print_table(
            f"{count} conversations, model turn {turn * 1000:.0f} ms, 4 agents per daemon",
            ["daemons", "all results on the remote", "throughput", "speed-up vs 1", "ideal"],
            rows,
        )
        results["throughput"] = {
            str(n): {"seconds": t, "per_s": count / t} for n, t in took.items()
        }
        results["scaling"] = {str(n): took[1] / t for n, t in took.items()}
        server.responder = lambda request: text_reply("Done.")
        results["takeover_s"] = takeover(base / "takeover", server)
        server.responder = lambda request: text_reply("Done.")
        lags = lag(base / "lag", server, samples)
        results["lag_p50_s"] = percentile(lags, 50)
        results["lag_p99_s"] = percentile(lags, 99)
        print_table(
            f"lease {LEASE:g} s, sync.interval {INTERVAL:g} s",
            ["takeover after SIGKILL", "sync lag p50", "sync lag p99"],
            [
                [
                    f"{results['takeover_s']:.2f} s",
                    f"{results['lag_p50_s'] * 1000:.0f} ms",
                    f"{results['lag_p99_s'] * 1000:.0f} ms",
                ]
            ],
        )
    return results


if __name__ == "__main__":
    main()
