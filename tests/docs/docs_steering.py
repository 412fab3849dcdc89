"""Handlers for the steering blocks of protocol/mail.md and protocol/lifecycle.md
(registered in ``tests/docs/test_docs.py``'s ``DOCS``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Protocol

from tests.conftest import git
from tests.docs.docblocks import Block

BIN = Path(sys.executable).parent


class HasTmp(Protocol):
    tmp: Path


def _workspace(tmp: Path) -> Path:
    ws = tmp / "steer"
    ws.mkdir()
    git(ws, "init", "-q", "-b", "main")
    (ws / "README.md").write_text("x\n", encoding="utf-8")
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "init")
    done = subprocess.run(
        [str(BIN / "jpfs"), "init"], cwd=ws, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return ws


def delivered_event(block: Block, env: HasTmp) -> None:
    """The event a run records when it delivers a human's mail mid-run is the block's,
    the message id and time aside."""
    from jpfs import api
    from jpfs.core import frontmatter
    from jpfs.core.conversation import Conversation
    from jpfs.core.workspace import open_workspace
    from jpfs.services.conversations import lifecycle, mail

    ws = open_workspace(_workspace(env.tmp))
    lifecycle.new_conversation(ws, "refactor", agent="default", task="Review the tests.")
    conv = Conversation(ws.conv_root, "refactor")
    conv.append_event("user", "Review the tests.")
    call = {"id": "t1", "name": "fs_read_file", "input": {"path": "README.md"}}
    conv.append_event("assistant", "", {"tool_calls": [call]})
    conv.append_event("tool", "x", {"tool_call_id": "t1"})
    doc_meta, doc_body = frontmatter.parse(block.text)
    shown_id = doc_meta["mail"][0]
    text = doc_body.rsplit("\n\n", 1)[1]
    msg = mail.send(ws, "refactor", "", text)
    runner = api.runner(ws)
    assert runner.steer(conv, conv.events(), None)
    made = conv.events()[-1]
    meta, body = frontmatter.parse(made.path.read_text(encoding="utf-8"))
    assert [k for k in meta if k != "created"] == [k for k in doc_meta if k != "created"]
    assert meta["delivered"] == doc_meta["delivered"] and meta["mail"] == [msg.id]
    assert body == doc_body.replace(shown_id, msg.id)
    assert mail.get(ws, "refactor", msg.id).read


def wrap_note(block: Block, env: HasTmp) -> None:
    """The budget note as jpfs words it, for the figures the block names."""
    from jpfs.services.conversations import steering

    figures = steering.Figures(
        budget_share=0.82, budget="budget_tokens = 400,000 of refactor: 328,000 spent"
    )
    (note,) = steering.notes_due([], figures)
    assert note.kind == "budget" and note.text == block.text.strip()
