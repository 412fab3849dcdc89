"""Benchmark many machines on one git remote: throughput with 1, 2 and 3 daemons, lease
takeover latency, sync lag.

Usage: python bench/bench_sync.py [--quick] [--conversations N [N ...]] [--turn S]
                                  [--transport git|http|https|ssh|file] [--rounds R]
                                  [--scale K]

Everything is the real runtime path: a bare repository as the remote, served over a
real network transport on 127.0.0.1 (``git daemon``: ``git://``, the default; smart
HTTP: ``git http-backend``, over ``https`` with a self-signed certificate the clients
trust (``GIT_SSL_CAINFO``); ``ssh``: OpenSSH's ``sshd``, the client key given by
``core.sshCommand`` as a deploy key is; or ``file`` for a local path), one clone per
daemon (real ``jpfs daemon start`` processes, ``sync.remote = "origin"``), a writer
clone without a daemon (its record attached beforehand, as a laptop sharing the record
has it) that creates the conversations and sends them with ``jpfs sync``, and the real anthropic SDK talking to ``tests/messages_server.py``,
whose model takes ``--turn`` seconds (0.2) per answer so that agents overlap as with a
real model.

``--scale K`` multiplies the turn, ``sync.interval`` and ``sync.lease`` (2 s, 0.3 s, 3 s):
the bench compresses a fleet's time (a real model's turn takes tens of seconds, jpfs's
defaults are a 2 s interval and a 30 s lease) while each git process still costs the
same CPU, so on a small machine the daemons' work at each wave's end crowds its cores;
a larger K shows the same fleet with less of that crowding.

* throughput: N conversations (36, then 108) from one ``jpfs sync`` until the remote's record
  holds every ``result.md``; with 1, 2 and 3 daemons (4 agents each); the scaling
  ratio is each throughput over the one-daemon throughput measured in the same run
  (medians of ``--rounds`` interleaved rounds, 3 by default: one run of 36 moves by
  half a second with whatever else the machine does),
  against the ideal (waves of 4 turns per daemon, times the turn). Beside it, one daemon
  that shares nothing (the same tasks written into its own clone), and where each
  sharing daemon's sync time went (``daemon status``'s ``sync.timings``, summed). Two
  sizes: with 36 (the issue's shape) three daemons run three waves, and the start (the
  writer's sync, the first fetch) and the end (the last results, pushed by all at once)
  weigh a third of their time; 108 measures the throughput of a fleet at work.
* round trips: the git processes that reach the remote (fetches and pushes: the steps
  of ``jpfs.services.sync.stats.REMOTE_STEPS``), all daemons summed, per turn.
* takeover: a daemon is SIGKILLed while its model call hangs; the time from the kill
  to the surviving daemon's model request for the same conversation (the lease is 3 s).
* sync lag: a file written in one daemon clone's conversation, until it appears in the
  other daemon clone's worktree (commit, push, fetch, merge); p50/p99.

``main(argv)`` returns the numbers as a dict for ``python -m bench``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
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
    stop_cleanly_on_sigterm,
    temp_dir,
    use_bytecode_cache,
)
from jpfs.services.sync.stats import REMOTE_STEPS

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


def serve(base: Path, transport: str, stack: ExitStack) -> str:
    """A bare repository under ``base``, served by ``transport``: its URL."""
    from tests.gitservers import GitDaemon, SmartHttp, Sshd

    srv = base / "srv"
    srv.mkdir(parents=True)
    git(base, "init", "-q", "--bare", "-b", "main", str(srv / "remote.git"))
    if transport == "file":
        return str(srv / "remote.git")
    if transport == "ssh":
        sshd = Sshd(srv, base / "sshd")
        stack.enter_context(sshd.start(probe="remote.git"))
        # Every git and jpfs process started from now on reads it as configuration
        # (GIT_CONFIG_COUNT: command-line scope; the bench's global config is /dev/null).
        os.environ.update(
            GIT_CONFIG_COUNT="1",
            GIT_CONFIG_KEY_0="core.sshCommand",
            GIT_CONFIG_VALUE_0=sshd.command(),
        )
        return sshd.url("remote.git")
    server: GitDaemon | SmartHttp
    if transport == "git":
        server = GitDaemon(srv)
    else:
        server = SmartHttp(srv, tls=base / "tls" if transport == "https" else None)
        if server.ca is not None:
            os.environ["GIT_SSL_CAINFO"] = str(server.ca)
    stack.enter_context(server.start(probe="remote.git"))
    return server.url("remote.git")


def setup(
    base: Path, daemons: int, transport: str, stack: ExitStack, share: bool = True
) -> tuple[Path, list[Path], Path]:
    base.mkdir(parents=True)
    remote_url = serve(base, transport, stack)
    remote = base / "srv" / "remote.git"
    seed = base / "seed"
    git(base, "clone", "-q", remote_url, str(seed))
    (seed / "README.md").write_text("# bench\n", encoding="utf-8")
    git(seed, "add", "README.md")
    git(seed, "commit", "-q", "-m", "initial")
    jpfs(seed, "init")
    (seed / ".jpfs" / "agents" / "bench.toml").write_text(AGENT, encoding="utf-8")
    for key, value in [
        ("conversations.default_agent", "bench"),
        ("agents.allowed", '["bench"]'),
        *(
            [
                ("sync.remote", "origin"),
                ("sync.interval", str(INTERVAL)),
                ("sync.lease", str(LEASE)),
            ]
            if share
            else []
        ),
    ]:
        jpfs(seed, "config", "set", key, value)
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "bench setup")
    git(seed, "push", "-q", "origin", "main")
    if share:
        jpfs(seed, "sync")
    clones = []
    for i in range(daemons):
        path = base / f"d{i + 1}"
        git(base, "clone", "-q", remote_url, str(path))
        if not share:
            jpfs(path, "init")  # no shared record: its own
        clones.append(path)
    writer = base / "writer"
    git(base, "clone", "-q", remote_url, str(writer))
    if share:
        # Attached as a laptop sharing the record is: its first jpfs command would make
        # the record's worktree (~0.15 s) inside the time measured.
        jpfs(writer, "sync")
    return remote, clones, writer


def start(ws: Path, url: str) -> int:
    jpfs(ws, "daemon", "start", env={"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": ws.name})
    return int((ws / ".jpfs" / "local" / "daemon.pid").read_text(encoding="utf-8"))


def wait_warm(ws: Path) -> None:
    """Until the daemon has loaded the model SDK (about a second of CPU, once): the
    throughput measured is a running daemon's, not its start's."""
    log = ws / ".jpfs" / "local" / "daemon.log"
    wait(
        lambda: log.exists() and "SDKs loaded" in log.read_text(encoding="utf-8"),
        60,
        f"{ws.name}'s daemon to load the SDK",
    )


def stop(ws: Path) -> None:
    subprocess.run(
        jpfs_argv("daemon", "stop", "--force", "--timeout", "30"), cwd=ws, capture_output=True
    )


class Results:
    """How many ``result.md`` the record branch of ``repo`` holds, polled cheaply: the
    tree is listed only when the branch moved (the poll runs every 50 ms beside the
    daemons measured, on the same cores). ``moved_at``: when the branch took the tip
    counted (wall clock), from the loose ref's modification time, so a result is timed
    when it landed (to a clock tick), not when the next poll saw it (0-50 ms later,
    plus the listing)."""

    def __init__(self, repo: Path) -> None:
        self.repo, self.tip, self.count, self.moved_at = repo, b"", 0, 0.0
        common = run_command(["git", "rev-parse", "--git-common-dir"], repo).decode().strip()
        self.ref = (repo / common / "refs" / "heads" / "jpfs-record").resolve()

    def __call__(self) -> int:
        try:
            before = os.stat(self.ref)
            tip = self.ref.read_bytes()  # a loose ref, as every push and commit leaves it
            after = os.stat(self.ref)
            same = (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
            moved_at = after.st_mtime if same else time.time()
        except FileNotFoundError:
            tip = run_command(
                ["git", "rev-parse", "-q", "--verify", "jpfs-record"], self.repo, ok=(0, 1)
            )
            moved_at = time.time()
        if tip and tip != self.tip:
            out = run_command(
                ["git", "ls-tree", "-r", "--name-only", tip.decode().strip()], self.repo
            )
            self.count = sum(1 for line in out.decode().splitlines() if line.endswith("/result.md"))
            self.tip, self.moved_at = tip, moved_at
        return self.count


def results_on(remote: Path) -> int:
    return Results(remote)()


def wait(predicate: Any, timeout: float, what: str, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    tick = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        tick.wait(every)


def cpu_seconds(ws: Path) -> float:
    """CPU time of the daemon of ``ws`` and of the children it reaped (git, mostly)."""
    pid = (ws / ".jpfs" / "local" / "daemon.pid").read_text(encoding="utf-8").split()[0]
    fields = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def sync_timings(ws: Path) -> dict[str, dict[str, float]]:
    status = json.loads(jpfs(ws, "daemon", "status", "--format", "json"))
    return dict(status.get("sync", {}).get("timings", {}))


def throughput(
    base: Path,
    server: Any,
    daemons: int,
    count: int,
    transport: str,
    turn: float,
    share: bool = True,
) -> tuple[float, dict[str, dict[str, float]]]:
    """Seconds until every result is on the remote (or, not sharing, in the daemon's own
    record), and the daemons' sync timings summed over that time (from the writer's
    sync until the last result is on the remote)."""
    with ExitStack() as stack:
        remote, clones, writer = setup(base, daemons, transport, stack, share)
        try:
            for ws in clones:
                start(ws, server.url)
            for ws in clones:
                wait_warm(ws)
            into = writer if share else clones[0]
            for i in range(count):
                conv = into / "conversations" / f"t-{i:04d}"
                conv.mkdir(parents=True)
                (conv / "task.md").write_text(f"# Task {i}\n\nSay hello.\n", encoding="utf-8")
            # The sync steps from here on only: the daemons' start and warm-up are not the
            # turns' (their idle cycles would count as the turns' round trips).
            warm = [sync_timings(ws) for ws in clones] if share else []
            t0, wall0 = time.monotonic(), time.time()
            if share:
                jpfs(writer, "sync")
            where = remote if share else clones[0]
            results = Results(where)
            wait(lambda: results() >= count, 900, f"{count} results", every=0.05)
            took = results.moved_at - wall0
            asked = sorted(r.received_at for r in server.requests if r.received_at >= t0)
            # Until the first model call, and from the last call's answer to the end.
            summed: dict[str, dict[str, float]] = {
                "(first call)": {"count": 1, "seconds": asked[0] - t0},
                "(after last)": {"count": 1, "seconds": t0 + took - asked[-1] - turn},
            }
            cpu = sum(cpu_seconds(ws) for ws in clones)
            summed["(cpu, daemons)"] = {"count": len(clones), "seconds": cpu}
            for ws, before in zip(clones if share else [], warm, strict=True):
                for step, value in sync_timings(ws).items():
                    into_step = summed.setdefault(step, {"count": 0, "seconds": 0.0})
                    was = before.get(step, {"count": 0, "seconds": 0.0})
                    into_step["count"] += value["count"] - was["count"]
                    into_step["seconds"] += value["seconds"] - was["seconds"]
            return took, summed
        finally:
            for ws in clones:
                stop(ws)


def takeover(base: Path, server: Any, transport: str, stack: ExitStack) -> float:
    """Seconds from SIGKILL of a daemon in a model call to the survivor's same call."""
    from tests.messages_server import text_reply

    _remote, clones, writer = setup(base, 2, transport, stack)
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


def lag(base: Path, server: Any, samples: int, transport: str, stack: ExitStack) -> list[float]:
    remote, clones, writer = setup(base, 2, transport, stack)
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


def own_cpu() -> float:
    """CPU seconds of this process and the children it reaped (git)."""
    self_, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return self_.ru_utime + self_.ru_stime + children.ru_utime + children.ru_stime


def scaling(
    base: Path, server: Any, count: int, turn: float, transport: str, most: int, rounds: int
) -> dict[str, Any]:
    """Throughput of 1, not sharing, then 1..``most`` daemons sharing, on ``count``
    conversations, ``rounds`` times interleaved (each round runs every configuration
    once, so a burst of other work on the machine hits them alike); prints the medians
    and the spread, returns the numbers. Sync timings are per round, averaged."""
    runs: dict[int, list[float]] = {}  # daemons -> seconds per round; 0: not sharing
    spent: dict[int, dict[str, dict[str, float]]] = {}
    for round_ in range(rounds):
        # Every other round in the reverse order: a configuration run after the others
        # meets what they left on the machine (the disk's freed inodes, a warm cache),
        # and a drift over a round is not charged to the last configuration each time.
        order = range(most + 1) if round_ % 2 == 0 else range(most, -1, -1)
        for daemons in order:
            seconds, found = throughput(
                base / f"r{round_}" / f"tp{daemons}",
                server,
                max(daemons, 1),
                count,
                transport,
                turn,
                share=daemons > 0,
            )
            runs.setdefault(daemons, []).append(seconds)
            into = spent.setdefault(daemons, {})
            for step, value in found.items():
                step_total = into.setdefault(step, {"count": 0.0, "seconds": 0.0})
                step_total["count"] += value["count"] / rounds
                step_total["seconds"] += value["seconds"] / rounds
    took = {n: percentile(times, 50) for n, times in runs.items()}

    def measured(n: int) -> str:
        low, high = min(runs[n]), max(runs[n])
        return f"{took[n]:.1f} s" + (f" ({low:.1f}-{high:.1f})" if rounds > 1 else "")

    rows = [["1, not sharing", measured(0), f"{count / took[0]:.2f}/s", "", "", ""]]
    for daemons in range(1, most + 1):
        ideal = math.ceil(count / (4 * daemons)) * turn
        rows.append(
            [
                str(daemons),
                measured(daemons),
                f"{count / took[daemons]:.2f}/s",
                f"{took[1] / took[daemons]:.2f}x",
                f"{ideal:.1f} s",
                f"{took[daemons] / ideal:.2f}x",
            ]
        )
    print_table(
        f"{count} conversations, model turn {turn:g} s, 4 agents per daemon,"
        f" remote over {transport}; median of {rounds} interleaved round(s) (min-max)",
        ["daemons", "all results on the remote", "throughput", "speed-up vs 1", "ideal",
         "over ideal"],
        rows,
    )  # fmt: skip
    steps = sorted({step for found in spent.values() for step in found})
    print_table(
        "sync time, all daemons summed (a round's, averaged over the rounds): count / seconds",
        ["daemons", *steps],
        [
            [str(n) if n else "1, not sharing"]
            + [
                f"{found.get(s, {}).get('count', 0):.0f} / "
                f"{found.get(s, {}).get('seconds', 0.0):.2f}"
                for s in steps
            ]
            for n, found in spent.items()
        ],
    )
    # Round trips per turn: each of these steps is one git process reaching the remote.
    trips = {
        n: sum(found.get(s, {}).get("count", 0.0) for s in REMOTE_STEPS) / count
        for n, found in spent.items()
        if n
    }
    print_table(
        "git processes reaching the remote per turn, all daemons summed"
        f" ({', '.join(REMOTE_STEPS)})",
        ["daemons", "per turn"],
        [[str(n), f"{per:.2f}"] for n, per in trips.items()],
    )
    alone = took.pop(0)
    return {
        "conversations": count,
        "rounds": rounds,
        "alone_s": alone,
        "runs_s": {str(n) if n else "alone": times for n, times in runs.items()},
        "throughput": {str(n): {"seconds": t, "per_s": count / t} for n, t in took.items()},
        "scaling": {str(n): took[1] / t for n, t in took.items()},
        "timings": {str(n) if n else "alone": found for n, found in spent.items()},
        "remote_processes_per_turn": {str(n): per for n, per in trips.items()},
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument(
        "--conversations", type=int, nargs="+", default=None,
        help="conversations per throughput run (36 108: the issue's shape, then steady state)",
    )  # fmt: skip
    parser.add_argument("--turn", type=float, default=None, help="model turn, seconds (2)")
    parser.add_argument("--samples", type=int, default=None, help="sync lag samples (30)")
    parser.add_argument(
        "--transport", choices=("git", "http", "https", "ssh", "file"), default="git"
    )
    parser.add_argument("--daemons", type=int, default=3, help="most daemons measured (3)")
    parser.add_argument(
        "--rounds", type=int, default=None, help="interleaved rounds per size (3; --quick: 1)"
    )
    parser.add_argument(
        "--scale", type=float, default=1.0,
        help="multiply the model turn, sync.interval and sync.lease (1): the bench runs a"
        " real fleet's time compressed, while each git process costs the same CPU",
    )  # fmt: skip
    args = parser.parse_args(argv)
    counts = args.conversations or ([24] if args.quick else [36, 108])
    turn = (args.turn if args.turn is not None else (1.0 if args.quick else 2.0)) * args.scale
    global INTERVAL, LEASE
    INTERVAL, LEASE = INTERVAL * args.scale, LEASE * args.scale
    samples = args.samples or (10 if args.quick else 30)
    rounds = args.rounds or (1 if args.quick else 3)
    pin_environment()
    print_machine()
    from tests.messages_server import MessagesServer, text_reply

    results: dict[str, Any] = {"turn_s": turn, "transport": args.transport, "scale": args.scale}
    with temp_dir("jpfs-bench-sync-") as base, MessagesServer() as server, ExitStack() as stack:
        use_bytecode_cache(base / "pycache")
        server.responder = lambda request: (time.sleep(turn), text_reply("Done."))[1]
        sizes = [
            scaling(base / f"n{count}", server, count, turn, args.transport, args.daemons, rounds)
            for count in counts
        ]
        results.update(sizes[0])  # the first size's numbers, where they always were
        results["sizes"] = {str(size["conversations"]): size for size in sizes}
        if args.quick:
            return results
        server.responder = lambda request: text_reply("Done.")
        results["takeover_s"] = takeover(base / "takeover", server, args.transport, stack)
        server.responder = lambda request: text_reply("Done.")
        lags = lag(base / "lag", server, samples, args.transport, stack)
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
    stop_cleanly_on_sigterm()
    main()
