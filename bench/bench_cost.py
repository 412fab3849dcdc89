"""Benchmark what delegation costs: prompt caching in a tool loop, and budget checks.

Usage: python bench/bench_cost.py [--quick] [--turns N] [--sizes 100,1000,10000]

* caching: one conversation runs a tool loop of N turns (default 30) through the real
  runtime (``jpfs.services.run.query.query``), the real anthropic SDK and
  ``tests/messages_server.py``, whose prompt-cache simulation counts each request's
  input as the Messages API would (cache reads, cache writes, fresh input; prefixes
  under 1,024 tokens are not cached). Each turn reads a 2 KB file, so the prompt grows
  as a real loop's does. The same loop runs with ``prompt_cache = false``. Reported:
  how many input tokens were sent as cache reads, and the dollars at
  claude-sonnet-4-5's prices, on against off.
* budget checks: :func:`jpfs.services.conversations.budgets.check` (what every model call pays) in
  records of 100, 1,000 and 10,000 conversations (10 events each), for a conversation
  whose top-level caller (9 siblings) has a budget, then for a budget over the whole
  record (every conversation under one root): the first look of a process (it reads
  the subtree), the first look of a new book that finds ``.jpfs/local/usage.bin``,
  warm (nothing changed), and after a turn (an event made and committed as a run does,
  then the check). Baseline: ``git ls-files`` of the record, in the same run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    Stats,
    add_profile,
    command,
    git,
    make_workspace,
    measure,
    ms,
    pin_environment,
    populate,
    print_machine,
    print_table,
    ratio,
    temp_dir,
)

MODEL = "claude-sonnet-4-5"
LOOPER = """\
model = "claude-sonnet-4-5"
provider = "anthropic"
description = "Benchmark: reads a file every turn."
prompt_cache = {cache}

[system]
role = "You are a careful research agent. Read what you are asked to read, then report."

[tools]
allow = ["fs_read_file", "fs_list_files", "fs_grep_files"]

[limits]
max_turns = 100
"""


def loop(tmp: Path, name: str, cache: bool, turns: int, server: Any) -> dict[str, Any]:
    """One ``turns``-turn tool loop; the usage jpfs recorded for it."""
    from jpfs.api import runner
    from jpfs.core.workspace import open_workspace
    from jpfs.services.run.query import query
    from tests.messages_server import PromptCache, text_reply, tool_results, tool_use_reply

    ws_root = make_workspace(tmp / name)
    add_profile(ws_root, "looper", LOOPER.format(cache="true" if cache else "false"))
    (ws_root / "notes.md").write_text("A line of the notes the agent reads.\n" * 55)
    git(ws_root, "add", "-A")
    git(ws_root, "commit", "-q", "-m", "bench profile")
    # After the workspace: making one pins the environment, API keys removed.
    os.environ["ANTHROPIC_API_KEY"] = "bench-key"
    os.environ["ANTHROPIC_BASE_URL"] = server.url
    server.prompt_cache = PromptCache(min_tokens=1024)

    def answer(request: dict[str, Any]) -> Any:
        if len(tool_results(request)) < turns:
            return tool_use_reply(
                ("fs_read_file", {"path": "notes.md"}), output_tokens=60, model=MODEL
            )
        return text_reply("The notes say the same line 55 times.", output_tokens=40, model=MODEL)

    server.responder = answer
    ws = open_workspace(ws_root)
    t0 = time.perf_counter()
    outcome = query(ws, "Read notes.md again and again.", agent="looper", runner=runner(ws))
    took = time.perf_counter() - t0
    spent = ws.spending.subtree(outcome.conversation)
    return {
        "seconds": took,
        "calls": spent.calls,
        "input_tokens": spent.input_tokens,
        "cache_read_input_tokens": spent.cache_read_input_tokens,
        "cache_creation_input_tokens": spent.cache_creation_input_tokens,
        "output_tokens": spent.output_tokens,
        "cost_usd": spent.cost_usd,
        "prompt_tokens": spent.input_tokens
        + spent.cache_read_input_tokens
        + spent.cache_creation_input_tokens,
    }


def bench_caching(tmp: Path, turns: int) -> dict[str, Any]:

    from jpfs.infra.providers.anthropic import load_sdk
    from tests.messages_server import MessagesServer

    load_sdk()  # neither loop pays the SDK's import
    with MessagesServer() as server:
        try:
            on = loop(tmp, "cache-on", True, turns, server)
            off = loop(tmp, "cache-off", False, turns, server)
        finally:
            os.environ.pop("ANTHROPIC_API_KEY", None)
            os.environ.pop("ANTHROPIC_BASE_URL", None)
    share = on["cache_read_input_tokens"] / on["prompt_tokens"]
    print_table(
        f"a {turns}-turn tool loop ({on['calls']} model calls), prompt caching on vs off"
        " (claude-sonnet-4-5 prices)",
        ["", "prompt tokens", "cache read", "cache write", "fresh input", "cost", "time"],
        [
            [name, r["prompt_tokens"], r["cache_read_input_tokens"],
             r["cache_creation_input_tokens"], r["input_tokens"], f"${r['cost_usd']:.4f}",
             f"{r['seconds']:.2f} s"]
            for name, r in (("caching on", on), ("caching off", off))
        ],
    )  # fmt: skip
    print(
        f"input sent as cache reads: {share:.1%} with caching on, 0% off;"
        f" cost on/off: {on['cost_usd'] / off['cost_usd']:.2f}"
    )
    return {"turns": turns, "on": on, "off": off, "cache_read_share": share}


def nest(ws_root: Path) -> None:
    """Every top-level conversation moved under one root ``all``, committed."""
    conv_root = ws_root / "conversations"
    (conv_root / "all").mkdir()
    (conv_root / "all" / "conversation.toml").write_text(
        (conv_root / "b-00000" / "conversation.toml").read_text(encoding="utf-8"),
        encoding="utf-8",
    )
    for path in sorted(conv_root.iterdir()):
        if path.name.startswith("b-"):
            path.rename(conv_root / "all" / path.name)
    git(conv_root, "add", "-A")
    git(conv_root, "commit", "-q", "-m", "bench: one root")


def budget(ws_root: Path, holder: str, tokens: int) -> None:
    """A budget on ``holder``'s [config] snapshot (as a caller's jp_query would give)."""
    from jpfs.core.conversation import Conversation

    conv = Conversation(ws_root / "conversations", holder)
    config = dict(conv.config)
    config["limits"] = {**config.get("limits", {}), "budget_tokens": tokens}
    conv.update(config=config)


def check_one(tmp: Path, size: int, shape: str, repeat: int) -> dict[str, Any]:
    from jpfs.core.conversation import Conversation
    from jpfs.core.workspace import open_workspace
    from jpfs.services.conversations import budgets
    from jpfs.services.run.runtime import Runner

    ws_root = make_workspace(tmp / f"checks-{size}-{shape}")
    populate(ws_root, size, 10)
    if shape == "all":
        nest(ws_root)
        holder, caller = "all", "all/b-00000/s1"
    else:
        holder, caller = "b-00000", "b-00000/s1"
    budget(ws_root, holder, 10**12)
    ws = open_workspace(ws_root)
    conv = Conversation(ws.conv_root, caller)
    cold = measure(lambda: budgets.check(open_workspace(ws_root), conv, "m"), repeat=1, warmup=0)
    # A new book after that one: it finds the sums the first left in .jpfs/local/usage.bin.
    cached = measure(lambda: budgets.check(open_workspace(ws_root), conv, "m"), repeat=repeat)
    warm = measure(lambda: budgets.check(ws, conv, "m"), repeat=repeat)

    runner = Runner(ws)
    samples = []
    for _ in range(repeat):
        # A turn as a run records it (its event made and committed), then the check.
        usage = {"input_tokens": 1}
        runner.record_event(conv, "assistant", "x", {"model": "m", "usage": usage}, event="bench")
        t0 = time.perf_counter()
        budgets.check(ws, conv, "m")
        samples.append(time.perf_counter() - t0)
    changed = Stats(tuple(samples))
    base = measure(command(["git", "ls-files"], ws.conv_root), repeat=repeat)
    return {
        "size": size,
        "budget on": "a top-level (10)" if shape == "top" else f"one root ({size})",
        "cold_ms": cold.median * 1000,
        "new_process": cached.to_json(),
        "warm": warm.to_json(),
        "after_event": changed.to_json(),
        "git_ls_files": base.to_json(),
        "warm_vs_git": warm.median / base.median,
    }


def bench_checks(tmp: Path, sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for size in sizes:
        for shape in ("top", "all"):
            rows.append(check_one(tmp, size, shape, repeat))
            print(
                f"  {size} conversations, budget on {rows[-1]['budget on']}: warm"
                f" {ms(rows[-1]['warm']['median_s'])}, after an event"
                f" {ms(rows[-1]['after_event']['median_s'])}",
                flush=True,
            )
    print_table(
        f"budgets.check before a model call ({repeat} runs, medians)",
        ["conversations", "budget on", "first look", "new book (cache)", "warm",
         "after a turn", "git ls-files", "after a turn vs git"],
        [
            [r["size"], r["budget on"], f"{r['cold_ms']:.1f} ms",
             ms(r["new_process"]["median_s"]), ms(r["warm"]["median_s"]),
             ms(r["after_event"]["median_s"]), ms(r["git_ls_files"]["median_s"]),
             ratio(r["after_event"]["median_s"], r["git_ls_files"]["median_s"])]
            for r in rows
        ],
    )  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer turns and sizes")
    parser.add_argument("--turns", type=int, help="tool-loop turns (default 30)")
    parser.add_argument("--sizes", help="record sizes for the checks (default 100,1000,10000)")
    args = parser.parse_args(argv)
    turns = args.turns or (10 if args.quick else 30)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else None
    sizes = sizes or ([100, 1000] if args.quick else [100, 1000, 10000])
    pin_environment()
    print_machine()
    with temp_dir() as tmp:
        caching = bench_caching(tmp, turns)
        checks = bench_checks(tmp, sizes, repeat=5 if args.quick else 15)
    return {"caching": caching, "checks": checks}


if __name__ == "__main__":
    main(sys.argv[1:])
