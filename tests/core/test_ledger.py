"""The ledger's subtree sums, kept by the record's tip, always equal a plain sum of the
files: checked after random sequences of what changes a record (turns, onboarding
calls, forks, removals, commits made by hand with git, new processes with the cache)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from jpfs.core import record, tree, usage
from jpfs.core.conversation import Conversation, create
from jpfs.core.ledger import Book
from jpfs.core.workspace import Workspace, open_workspace
from jpfs.infra.providers.base import Usage
from jpfs.services.conversations import lifecycle
from tests.conftest import rgit

MODELS = ("claude-sonnet-4-5", "claude-haiku-4-5", "local-model")


def plain(ws: Workspace, holder: str) -> usage.Spend:
    """The reference: every call of the subtree, read from the files."""
    total = usage.Spend()
    for conv_id in [holder, *tree.walk(ws.conv_root, holder)]:
        for call in usage.calls(Conversation(ws.conv_root, conv_id), ws.prices):
            total = total + call.spend
    return total


def turn(ws: Workspace, conv_id: str, rng: random.Random) -> None:
    conv = Conversation(ws.conv_root, conv_id)
    model = rng.choice(MODELS)
    spent = Usage(rng.randrange(1000), rng.randrange(100), rng.randrange(5000), rng.randrange(500))
    if rng.random() < 0.3:
        usage.append_call(conv, "onboarding round 1", model, spent, ws.prices)
    else:
        conv.append_event("user", "go")
        meta = {"model": model, "usage": usage.record(spent, model, ws.prices)}
        conv.append_event("assistant", "done", meta)
    record.commit(ws, conv_id, "assistant")


def by_hand(ws: Workspace, conv_id: str) -> None:
    """An event written and committed with plain git, as a peer's merge brings one."""
    conv = Conversation(ws.conv_root, conv_id)
    conv.append_event(
        "assistant", "x", {"model": "claude-haiku-4-5", "usage": {"output_tokens": 7}}
    )
    rgit(ws.root, "add", "-A")
    rgit(ws.root, "commit", "-q", "-m", "by hand")


@pytest.mark.parametrize("seed", range(4))
def test_subtree_sums_follow_every_change(ws: Path, seed: int) -> None:
    rng = random.Random(seed)
    w = open_workspace(ws)
    create(w.conv_root, "top", agent="default")
    record.commit(w, "top", "new")
    book = Book(w.conv_root, w.prices, w.local_dir / "usage.bin")
    convs = ["top"]
    for step in range(40):
        action = rng.choice(["new", "turn", "turn", "turn", "fork", "rm", "hand", "process"])
        live = [c for c in convs if (w.conv_root / c).is_dir()]
        if action == "new" or not live:
            parent = rng.choice(live) if live else None
            conv_id = f"{parent}/n{step}" if parent else f"n{step}"
            create(w.conv_root, conv_id, agent="default")
            record.commit(w, conv_id, "new")
            convs.append(conv_id)
        elif action == "turn":
            turn(w, rng.choice(live), rng)
        elif action == "fork":
            source = rng.choice(live)
            if Conversation(w.conv_root, source).event_names():
                convs.append(lifecycle.fork_conversation(w, source).id)
        elif action == "rm" and len(live) > 1:
            victim = rng.choice([c for c in live if c != "top"])
            lifecycle.remove_conversation(w, victim, cascade=True)
        elif action == "hand":
            by_hand(w, rng.choice(live))
        elif action == "process":
            book = Book(w.conv_root, w.prices, w.local_dir / "usage.bin")
        for holder in ["top", *rng.sample(live, min(2, len(live)))]:
            if (w.conv_root / holder).is_dir():
                assert book.subtree(holder) == plain(w, holder), (seed, step, action, holder)


def test_a_fork_counts_only_its_own_calls(ws: Path) -> None:
    w = open_workspace(ws)
    create(w.conv_root, "src", agent="default")
    turn(w, "src", random.Random(1))
    turn(w, "src", random.Random(2))
    child = lifecycle.fork_conversation(w, "src")
    book = Book(w.conv_root, w.prices)
    assert book.of(child.id) == usage.Spend()
    assert book.subtree("src") == book.of("src") == plain(w, "src")
