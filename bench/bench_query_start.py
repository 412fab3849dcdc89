"""Benchmark ``jpfs query`` start to finish against an instant model, with and without
a daemon to hand the run to, against ``python -c "import anthropic"``.

Usage: python bench/bench_query_start.py [--quick] [--runs N]

The model is the real anthropic provider (the real SDK, one real HTTP request) talking
to ``tests/messages_server.py``, which answers at once: what is measured is start-up,
imports and jpfs's own work. Two workspaces, one with a running daemon (``jpfs daemon
start``, its SDK loaded) and one without; every round runs, in turn:

* the baseline, ``python -c "import anthropic"``;
* ``jpfs query --new --agent instant --non-interactive hi`` in the workspace without a
  daemon (target <= 1.3x the baseline): the run and its SDK import in this process;
* the same where a daemon runs (target <= 0.6x): handed over on its socket;
* for reference, both with ``zero``, an instant scripted agent (no SDK at all).

``main(argv)`` returns the numbers as a dict for ``python -m bench``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    add_profile,
    command,
    git,
    jpfs_argv,
    make_workspace,
    measure_interleaved,
    ms,
    pin_environment,
    print_machine,
    print_table,
    ratio,
    run_command,
    temp_dir,
    use_bytecode_cache,
)

WITH_DAEMON = 0.6
WITHOUT_DAEMON = 1.3

INSTANT = """\
# The anthropic provider against a local server that answers at once. For benchmarks.
model = "claude-bench"
provider = "anthropic"
description = "Benchmark: the real SDK, an instant model."

[onboarding]
enabled = false
"""

ZERO = """\
# Zero-latency scripted agent. For benchmarks.
model = "script-zero"
provider = "script"
description = "Benchmark: answers at once, no SDK."

[onboarding]
enabled = false

[[script.turns]]
text = "ok: {input}"
"""


def workspace(path: Path) -> Path:
    ws = make_workspace(path)
    add_profile(ws, "instant", INSTANT)
    add_profile(ws, "zero", ZERO)
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "bench profiles")
    return ws


def wait_for_sdk(ws: Path, timeout: float = 60.0) -> None:
    """Until the daemon has loaded the SDK (it does once caught up, off any run)."""
    log = ws / ".jpfs" / "local" / "daemon.log"
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while "SDKs loaded for handed-over queries: anthropic" not in log.read_text(encoding="utf-8"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the daemon did not load the SDK within {timeout:.0f} s")
        pause.wait(0.05)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--runs", type=int, help="interleaved rounds (default 15)")
    args = parser.parse_args(argv)
    runs = args.runs or (5 if args.quick else 15)
    pin_environment()
    print_machine()
    from tests.messages_server import MessagesServer, text_reply

    with temp_dir() as tmp, MessagesServer() as server:
        server.responder = lambda request: text_reply("ok")
        use_bytecode_cache(tmp / "pycache")
        alone = workspace(tmp / "alone")
        served = workspace(tmp / "served")
        # After the workspaces: making one pins the environment, API keys removed.
        os.environ["ANTHROPIC_API_KEY"] = "bench-key"
        os.environ["ANTHROPIC_BASE_URL"] = server.url
        run_command(jpfs_argv("daemon", "start"), served)
        try:
            wait_for_sdk(served)

            def query(ws: Path, agent: str) -> Any:
                argv = jpfs_argv("query", "--new", "--agent", agent, "--non-interactive", "hi")
                return command(argv, ws)

            got = measure_interleaved(
                {
                    "baseline": command([sys.executable, "-c", "import anthropic"], tmp),
                    "alone": query(alone, "instant"),
                    "served": query(served, "instant"),
                    "zero alone": query(alone, "zero"),
                    "zero served": query(served, "zero"),
                },
                repeat=runs,
            )
            handed = (served / ".jpfs/local/daemon.log").read_text().count("handed over")
        finally:
            run_command(jpfs_argv("daemon", "stop"), served)
        for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
            del os.environ[key]
    load = os.getloadavg()[0]
    base = got["baseline"].median

    def verdict(name: str, target: float) -> str:
        value = got[name].median / base
        return f"{value:.2f}x (target <= {target}x: {'met' if value <= target else 'MISSED'})"

    print_table(
        f'`jpfs query` against an instant model vs python -c "import anthropic"'
        f" ({runs} interleaved rounds, medians; load average {load:.1f} at the end)",
        ["what", "median", "p99", "vs baseline"],
        [
            ['python -c "import anthropic"  (baseline)', ms(base), ms(got["baseline"].p99), "1.00x"],
            ["jpfs query, anthropic, no daemon", ms(got["alone"].median),
             ms(got["alone"].p99), verdict("alone", WITHOUT_DAEMON)],
            ["jpfs query, anthropic, daemon running", ms(got["served"].median),
             ms(got["served"].p99), verdict("served", WITH_DAEMON)],
            ["jpfs query, scripted zero, no daemon", ms(got["zero alone"].median),
             ms(got["zero alone"].p99), ratio(got["zero alone"].median, base)],
            ["jpfs query, scripted zero, daemon running", ms(got["zero served"].median),
             ms(got["zero served"].p99), ratio(got["zero served"].median, base)],
        ],
    )  # fmt: skip
    print(f"(queries the daemon ran for the CLI: {handed})")
    return {
        "runs": runs,
        **{name.replace(" ", "_"): stats.to_json() for name, stats in got.items()},
        "ratio_without_daemon": got["alone"].median / base,
        "ratio_with_daemon": got["served"].median / base,
        "targets": {"with_daemon": WITH_DAEMON, "without_daemon": WITHOUT_DAEMON},
        "handed_over": handed,
        "loadavg_1m_end": load,
    }


if __name__ == "__main__":
    main(sys.argv[1:])
