"""``make bench``: run every ``bench/bench_*.py`` and collect their numbers.

Usage: python -m bench [--quick] [--only NAME]... [--out FILE]

Each module's ``main(argv) -> dict`` runs in turn, in this process, and prints its
own tables; ``argv`` is ``["--quick"]`` with --quick (smaller sizes, a few minutes in
all) and empty otherwise. ``--only commit`` (or ``bench_commit``) runs just that one.
The combined numbers, with the date and the machine, go to bench/out/results.json. A
bench that fails is reported and the others still run; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import importlib
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from bench.common import machine, print_table  # noqa: E402


def discover() -> list[str]:
    """Short names (``cli`` for bench_cli.py), sorted."""
    return sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


def run_one(name: str, argv: list[str]) -> tuple[dict[str, Any] | None, str | None]:
    try:
        module = importlib.import_module(f"bench.bench_{name}")
        result = module.main(argv)
    except SystemExit as exc:  # argparse rejecting argv, or a bench bailing out
        if exc.code in (0, None):
            return {}, None
        return None, f"exited with status {exc.code} (argv {argv})"
    except Exception:
        traceback.print_exc()
        return None, traceback.format_exc().strip().splitlines()[-1]
    return (result if isinstance(result, dict) else {"result": result}), None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes: a few minutes")
    parser.add_argument("--only", action="append", metavar="NAME", help="run only NAME")
    parser.add_argument("--out", type=Path, default=HERE / "out" / "results.json")
    args = parser.parse_args(argv)
    names = discover()
    if args.only:
        wanted = [n.removeprefix("bench_").removesuffix(".py") for n in args.only]
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            parser.error(f"no bench named {', '.join(unknown)} (have: {', '.join(names)})")
        names = [n for n in names if n in wanted]
    bench_argv = ["--quick"] if args.quick else []
    started = dt.datetime.now(dt.UTC).replace(microsecond=0)
    results: dict[str, Any] = {}
    errors: dict[str, str] = {}
    seconds: dict[str, float] = {}
    for name in names:
        print(f"\n=== bench_{name} {' '.join(bench_argv)}".rstrip(), flush=True)
        t0 = time.perf_counter()
        result, error = run_one(name, list(bench_argv))
        seconds[name] = time.perf_counter() - t0
        if error is not None:
            errors[name] = error
            print(f"bench_{name} FAILED: {error}", flush=True)
        else:
            results[name] = result
    report = {
        "date": started.isoformat().replace("+00:00", "Z"),
        "quick": args.quick,
        "machine": machine(),
        "seconds": seconds,
        "results": results,
        "errors": errors,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=_jsonable) + "\n", encoding="utf-8")
    print_table(
        "summary",
        ["bench", "time", "status"],
        [[f"bench_{n}", f"{seconds[n]:.0f} s", errors.get(n, "ok")[:70]] for n in names],
    )
    print(f"\nnumbers written to {args.out}")
    return 1 if errors else 0


if __name__ == "__main__":
    from bench.common import stop_cleanly_on_sigterm

    stop_cleanly_on_sigterm()
    raise SystemExit(main())
