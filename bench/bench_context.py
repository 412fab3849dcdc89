"""Benchmark context that fits: a long research loop on a small window and a large one.

Usage: python bench/bench_context.py [--quick] [--files N] [--kib K]

A researcher reads N files (default 40, 6 KiB each) one a model call, through the real
runtime (``jpfs.services.run.query.query``), the real anthropic SDK and
``tests/messages_server.py``: its prompt-cache simulation counts each request's input as
the Messages API would (cache reads, writes, fresh input; prefixes under 1,024 tokens
are not cached), and its model rules refuse a prompt over the model's window (the
stand-in tokenizer: about four characters of JSON a token). Two models, a 32,000-token
window and a 200,000-token one, each run twice:

* managed: the profile's ``context_window`` is the model's, so the view fits each
  request to it (protocol/agents.md, "What the model sees");
* baseline, in the same run: no window known and no refit after a refusal, so the
  whole record is sent every call and a refusal for length ends the run (what jpfs did
  before it knew windows).

Reported for each: whether the loop completed (or the server's refusal), the largest
prompt against the window, the input tokens of all calls (fresh, cache reads and
writes), the share read from cache, and the dollars at claude-sonnet-4-6's prices.
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
    add_profile,
    git,
    make_workspace,
    pin_environment,
    print_machine,
    print_table,
    temp_dir,
)

PRICED_AS = "claude-sonnet-4-6"
READER = """\
model = "{model}"
provider = "anthropic"
description = "Benchmark: reads one file a turn."
max_tokens = 2048
{window}
[system]
role = "You are a careful research agent. Read each file you are asked to, then report."

[tools]
allow = ["fs_read_file"]

[limits]
max_turns = 200
"""
WINDOWS = {"bench-32k": 32_000, "bench-200k": 200_000}


def run_loop(
    tmp: Path, model: str, managed: bool, files: int, kib: int, server: Any
) -> dict[str, Any]:
    """One loop of ``files`` reads; what the record and the server say of it."""
    from jpfs.api import runner
    from jpfs.core import prices
    from jpfs.core.workspace import open_workspace
    from jpfs.errors import JpfsError
    from jpfs.infra.providers.base import Usage
    from jpfs.services.run import turn
    from jpfs.services.run.query import query
    from tests.api_rules import ModelRules, prompt_tokens
    from tests.messages_server import PromptCache, text_reply, tool_results, tool_use_reply

    window = WINDOWS[model]
    name = f"{model}-{'managed' if managed else 'baseline'}"
    ws_root = make_workspace(tmp / name)
    line = "A line of a document the researcher reads, with words and numbers 0123.\n"
    (ws_root / "docs").mkdir()
    for n in range(files):
        text = f"document {n}\n" + line * (kib * 1024 // len(line))
        (ws_root / "docs" / f"{n}.txt").write_text(text, encoding="utf-8")
    add_profile(
        ws_root,
        "reader",
        READER.format(model=model, window=f"context_window = {window}" if managed else ""),
    )
    git(ws_root, "add", "-A")
    git(ws_root, "commit", "-q", "-m", "bench files")
    os.environ["ANTHROPIC_API_KEY"] = "bench-key"
    os.environ["ANTHROPIC_BASE_URL"] = server.url
    server.prompt_cache = PromptCache(min_tokens=1024)
    rules = ModelRules(context_window=window, count_usage=True)
    server.models[model] = rules
    first = len(server.requests)

    def answer(request: dict[str, Any]) -> Any:
        done = len(tool_results(request))
        if done < files:
            return tool_use_reply(("fs_read_file", {"path": f"docs/{done}.txt"}), output_tokens=60)
        return text_reply(f"Read {files} documents.", output_tokens=200)

    server.responder = answer
    ws = open_workspace(ws_root)
    t0 = time.perf_counter()
    error = ""
    refits = turn._REFITS
    turn._REFITS = refits if managed else 0
    try:
        outcome = query(ws, "Read every file in docs/.", agent="reader", runner=runner(ws))
        conv = outcome.conversation
        completed = outcome.state.value == "idle"
    except JpfsError as exc:
        completed, error, conv = False, str(exc), ""
    finally:
        turn._REFITS = refits
    took = time.perf_counter() - t0
    sent = [r.body for r in server.requests[first:]]
    largest = max(prompt_tokens(b, rules) for b in sent)
    conv = conv or next(p.name for p in (ws_root / "conversations").iterdir() if p.is_dir())
    spent = ws.spending.subtree(conv)
    usage = Usage(
        spent.input_tokens,
        spent.output_tokens,
        spent.cache_read_input_tokens,
        spent.cache_creation_input_tokens,
    )
    prompt = usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
    state = "yes" if completed else "no"
    if not completed:
        failed = Path(ws_root / "conversations" / conv / "events")
        last = sorted(failed.glob("*-error.md"))
        error = error or (
            last[-1].read_text(encoding="utf-8").split("+++")[-1].strip() if last else ""
        )
        state = f"no ({error[:40]}...)"
    return {
        "completed": completed,
        "state": state,
        "calls": len(sent),
        "largest_prompt": largest,
        "window": window,
        "input_tokens": prompt,
        "cache_read_share": usage.cache_read_input_tokens / prompt if prompt else 0.0,
        "cost_usd": prices.cost_of(usage, PRICED_AS, prices.PRICES) or 0.0,
        "seconds": took,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="12 files")
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--kib", type=int, default=6, help="size of each file")
    args = parser.parse_args(argv)
    files = 12 if args.quick else args.files
    pin_environment()
    print_machine()
    from jpfs.infra.providers.anthropic import load_sdk
    from tests.messages_server import MessagesServer

    load_sdk()
    results: dict[str, Any] = {}
    rows = []
    with temp_dir("jpfs-bench-context-") as tmp, MessagesServer() as server:
        for model in WINDOWS:
            for managed in (False, True):
                got = run_loop(tmp, model, managed, files, args.kib, server)
                key = f"{model}/{'managed' if managed else 'baseline'}"
                results[key] = got
                rows.append(
                    [
                        key,
                        got["state"],
                        str(got["calls"]),
                        f"{got['largest_prompt']:,} / {got['window']:,}",
                        f"{got['input_tokens']:,}",
                        f"{got['cache_read_share']:.0%}",
                        f"${got['cost_usd']:.3f}",
                    ]
                )
    print_table(
        f"{files} files of {args.kib} KiB, one read a call ({PRICED_AS} prices)",
        ["loop", "completed", "calls", "largest prompt / window", "input tokens", "cache read",
         "cost"],
        rows,
    )  # fmt: skip
    for model in WINDOWS:
        base, managed = results[f"{model}/baseline"], results[f"{model}/managed"]
        if not base["completed"]:
            print(f"{model}: the baseline was refused after {base['calls']} calls;"
                  f" managed: {'completed' if managed['completed'] else 'refused too'}")  # fmt: skip
        elif base["input_tokens"]:
            print(
                f"{model}: managed/baseline input tokens"
                f" {managed['input_tokens'] / base['input_tokens']:.2f}x,"
                f" cost {managed['cost_usd'] / max(base['cost_usd'], 1e-9):.2f}x"
            )
    return results


if __name__ == "__main__":
    main()
