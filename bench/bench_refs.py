"""Benchmark the in-process part of a sync cycle that finds nothing to do.

Usage: python bench/bench_refs.py [--quick] [--rounds N]

A workspace shares its record through a bare remote on a local path (``jpfs sync``
made the record and the tracking refs), and a :class:`SyncEngine` is built on it as a
daemon builds its own. Measured, in the process, with no git program started: the
questions a cycle with nothing new asks of the refs (:meth:`SyncEngine.push` finding
nothing to send: the record, its tracking ref, whether one contains the other) and
``daemon status``'s ``sync`` object (:func:`jpfs.services.sync.report.status`: how far
the record and the remote's have diverged), which a daemon rebuilds at each status
refresh. With pygit2 handles kept per thread (:data:`jpfs.infra.git.refs.HANDLE_TTL`,
1 s), against the same with a new handle per question (``HANDLE_TTL = 0``, what jpfs
did before), in alternation. bench/DECISIONS.md says why the handles are kept.

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
    git,
    jpfs_argv,
    make_workspace,
    measure_interleaved,
    pin_environment,
    print_machine,
    print_table,
    ratio,
    run_command,
    temp_dir,
)


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} us"


def shared_workspace(tmp: Path) -> Path:
    """A workspace whose record a bare remote on a local path shares."""
    ws = make_workspace(tmp / "ws")
    git(tmp, "init", "-q", "--bare", "-b", "main", str(tmp / "remote.git"))
    git(ws, "remote", "add", "origin", str(tmp / "remote.git"))
    run_command(jpfs_argv("config", "set", "sync.remote", "origin"), ws)
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "share the record")
    git(ws, "push", "-q", "origin", "main")
    run_command(jpfs_argv("sync"), ws)
    return ws


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 2000)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (300 if args.quick else 2000)
    pin_environment()
    print_machine()
    from jpfs.core.workspace import open_workspace
    from jpfs.infra.git import refs
    from jpfs.services.sync import report
    from jpfs.services.sync.engine import SyncEngine

    with temp_dir() as tmp:
        ws = open_workspace(shared_workspace(tmp), search=False)
        engine = SyncEngine(ws, share=False)
        try:

            def cycle(ttl: float) -> Any:
                def ask() -> None:
                    refs.HANDLE_TTL = ttl
                    assert engine.push()  # nothing to send: no git program
                    report.status(engine)

                return ask

            got = measure_interleaved(
                {"new handle per question": cycle(0.0), "kept handles": cycle(1.0)},
                repeat=rounds,
                warmup=5,
            )
        finally:
            refs.HANDLE_TTL = 1.0
            engine.close()
    base, kept = got["new handle per question"], got["kept handles"]
    print_table(
        f"A cycle with nothing to do, in process: push() finding nothing + the status's"
        f" sync object; median of {rounds} alternated rounds",
        ["handles", "median", "p99", "vs new handle per question"],
        [
            ["new handle per question (before)", us(base.median), us(base.p99), "1.00x"],
            [
                "kept per thread for 1 s",
                us(kept.median),
                us(kept.p99),
                ratio(kept.median, base.median),
            ],
        ],
    )
    return {"fresh": base.to_json(), "kept": kept.to_json()}


if __name__ == "__main__":
    main()
