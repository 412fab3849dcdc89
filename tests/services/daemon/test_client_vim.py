"""Real vim is the interface the README promises (issue #14): with the daemon running, a
human creates ``task.md`` in vim, the agent asks its onboarding questions, the human
answers in ``answers.md`` in vim, and the agent works and writes ``result.md``.

vim saves the way it does for its users: a swap file beside the file while it is open,
and for a file that exists, the ``4913`` probe, then the old file renamed to
``answers.md~`` and a new one written (``writebackup``, ``backupcopy=auto``). The only
setting changed from vim's defaults is ``backupskip``, whose default skips backups under
``/tmp``, where the test repository lives.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from jpfs.core.locks import is_locked
from tests.conftest import git, rgit, running_daemon, wait_until
from tests.services.daemon.test_daemon_helpers import (
    leftovers,
    log_lines,
    setup_workspace,
    state_of,
)

VIM = shutil.which("vim")
CONV = "refactor"


def vim_save(path: Path, lines: list[str]) -> None:
    """Open ``path`` in vim, make its text ``lines``, save and quit, as a human would."""
    assert VIM is not None
    text = "[" + ", ".join(json.dumps(line) for line in lines) + "]"
    done = subprocess.run(
        [
            VIM, "-N", "-u", "NONE", "-i", "NONE", "-es",
            "-c", "set backupskip=",
            "-c", "%delete _",
            "-c", f"call setline(1, {text})",
            "-c", "wq",
            path.name,
        ],
        cwd=path.parent, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"vim failed ({done.returncode}): {done.stdout} {done.stderr}"
    assert path.read_text(encoding="utf-8") == "".join(f"{line}\n" for line in lines)


def subjects(ws: Path) -> list[str]:
    return [line.split("|", 1)[1] for line in log_lines(ws, CONV)]


@pytest.mark.skipif(VIM is None, reason="vim is not installed")
def test_a_conversation_driven_by_vim_saves(ws: Path) -> None:
    setup_workspace(ws, default_agent="lead")
    conv = ws / "conversations" / CONV
    with running_daemon(ws):
        # README: `mkdir -p conversations/refactor`, then `$EDITOR .../task.md`.
        conv.mkdir()
        vim_save(conv / "task.md", ["# Review the code", "", "Find what matters."])
        wait_until(
            lambda: state_of(ws, CONV) == "waiting", timeout=20, message="onboarding questions"
        )
        wait_until(lambda: not is_locked(ws / ".jpfs/local", CONV), message="the asking run to end")
        assert "Which part of the code matters?" in (conv / "questions.md").read_text()
        assert 'title = "Review the code"' in (conv / "conversation.toml").read_text()

        # The human saves a skeleton first (only a comment: not an answer yet) ...
        answers = conv / "answers.md"
        vim_save(answers, ["# Answers", "", "## Round 1", "", "<!-- answer here -->"])
        wait_until(
            lambda: f"jpfs({CONV}): answers" in subjects(ws), message="the skeleton committed"
        )
        assert state_of(ws, CONV) == "waiting"
        # ... then answers and saves again: vim renames the old file away and writes anew.
        before = os.stat(answers).st_ino
        vim_save(answers, ["# Answers", "", "## Round 1", "", "The parser."])
        assert os.stat(answers).st_ino != before, "vim did not save by backup and rename"

        wait_until(lambda: (conv / "result.md").exists(), timeout=30, message="result.md")
        wait_until(lambda: state_of(ws, CONV) == "idle", timeout=20, message="the run to end")
        wait_until(lambda: not rgit(ws, "status", "--porcelain"), message="a clean record")

    result = (conv / "result.md").read_text()
    assert "Final answer." in result and "Helper says hello." in result
    history = subjects(ws)
    assert history[0] == f"jpfs({CONV}): task" and history[-1] == f"jpfs({CONV}): result"
    answered = [i for i, s in enumerate(history) if s == f"jpfs({CONV}): answers"]
    assert len(answered) == 2, history  # both saves, each committed
    assert history.index(f"jpfs({CONV}): questions") < answered[0]
    assert answered[-1] < history.index(f"jpfs({CONV}): ready")
    authors = {s: a for a, s in (line.split("|", 1) for line in log_lines(ws, CONV))}
    assert authors[f"jpfs({CONV}): task"] == authors[f"jpfs({CONV}): answers"] == "Test User"
    # What vim wrote is what the record holds; vim's own files never reached it.
    assert rgit(ws, "show", f"HEAD:{CONV}/answers.md") == (conv / "answers.md").read_text()
    assert rgit(ws, "show", f"HEAD:{CONV}/task.md") == (conv / "task.md").read_text()
    tracked = rgit(ws, "ls-files").splitlines()
    assert not [p for p in tracked if p.endswith((".swp", ".swx", "~", "4913"))], tracked
    assert leftovers(ws) == []
    assert git(ws, "ls-files", "conversations") == ""
