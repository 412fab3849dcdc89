"""A conversation handle's listing of ``events/`` is reused while the directory is
unchanged, and never hides an event another writer added or removed: event numbering
and the runner's "events since my last commit" stay right with other writers about."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jpfs
from jpfs.core.conversation import Conversation, create
from jpfs.core.workspace import open_workspace
from jpfs.services.run.runtime import Runner
from tests.conftest import rgit, wait_until

PROJECT_ROOT = Path(jpfs.__file__).resolve().parent.parent

APPEND = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from jpfs.core.conversation import Conversation

    event = Conversation(Path(sys.argv[1]), sys.argv[2]).append_event("user", "from afar")
    print(event.path.name)
    """
)


def append_elsewhere(root: Path, conv_id: str) -> str:
    """Append an event from another process; the new file's name."""
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", APPEND, str(root), conv_id],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def names(conv: Conversation) -> list[str]:
    return [name for _, _, name in conv.event_names()]


def test_numbering_sees_another_process_append(tmp_path: Path) -> None:
    conv = create(tmp_path, "c", agent="a")
    for n in range(3):
        conv.append_event("assistant", f"{n}")
    assert append_elsewhere(tmp_path, "c") == "0004-user.md"
    # Within the clock tick of our own write the directory's stamp may not have moved:
    # the handle still finds the next number taken and lists again.
    assert conv.append_event("assistant", "after").path.name == "0005-assistant.md"
    assert names(conv) == [
        "0001-assistant.md", "0002-assistant.md", "0003-assistant.md", "0004-user.md",
        "0005-assistant.md",
    ]  # fmt: skip


def test_two_handles_interleave(tmp_path: Path) -> None:
    a = create(tmp_path, "c", agent="a")
    b = Conversation(tmp_path, "c")
    seqs = []
    for n in range(10):
        writer = a if n % 3 else b
        seqs.append(writer.append_event("user" if n % 2 else "tool", f"{n}").seq)
    assert seqs == list(range(1, 11))
    assert [seq for seq, _, _ in a.event_names()] == list(range(1, 11))


def test_a_removed_last_event_is_noticed(tmp_path: Path) -> None:
    conv = create(tmp_path, "c", agent="a")
    conv.append_event("user", "one")
    last = conv.append_event("assistant", "two")
    last.path.unlink()
    assert names(conv) == ["0001-user.md"]
    assert conv.append_event("assistant", "again").seq == 2


def test_a_file_named_by_hand_shows_once_settled(tmp_path: Path) -> None:
    conv = create(tmp_path, "c", agent="a")
    conv.append_event("user", "one")
    # Out of sequence and in no jpfs role: only the directory's stamp can tell, which a
    # same-tick change may not move; the handle lists again once the directory settles.
    (conv.events_dir / "0007-note.md").write_text("by hand\n")
    wait_until(lambda: "0007-note.md" in names(conv), timeout=3, message="the listing")
    assert conv.append_event("assistant", "next").seq == 8


def test_a_settled_listing_sees_any_change_at_once(tmp_path: Path) -> None:
    conv = create(tmp_path, "c", agent="a")
    for n in range(5):
        conv.append_event("user", f"{n}")

    def settled() -> bool:
        st = os.stat(conv.events_dir)
        return max(st.st_mtime_ns, st.st_ctime_ns) < time.time_ns() - 200_000_000

    wait_until(settled, timeout=3, message="events/ to settle")
    assert len(names(conv)) == 5  # listed settled: reused while the stamp holds
    (conv.events_dir / "0009-note.md").write_text("by hand\n")
    assert names(conv)[-1] == "0009-note.md"  # a later change moved the stamp


def test_runner_commits_events_another_process_appended(ws: Path) -> None:
    workspace = open_workspace(ws, search=False)
    conv = create(workspace.conv_root, "r1", agent="default", config={})
    runner = Runner(workspace)
    conv.append_event("user", "hello")
    runner.commit(conv, "input")  # the run's first commit: all of events/
    conv.append_event("assistant", "one")
    runner.commit(conv, "assistant")  # later ones: the events since
    theirs = append_elsewhere(workspace.conv_root, "r1")
    conv.append_event("assistant", "two")
    runner.commit(conv, "assistant")
    tracked = rgit(ws, "ls-files", "r1/events").split()
    assert tracked == [
        "r1/events/0001-user.md", "r1/events/0002-assistant.md", f"r1/events/{theirs}",
        "r1/events/0004-assistant.md",
    ]  # fmt: skip
    assert rgit(ws, "status", "--porcelain") == ""
    workspace.committer.close(wait=True)


def test_known_event_names_follow_the_directory(tmp_path: Path) -> None:
    conv = create(tmp_path, "c", agent="a")
    assert conv.known_event_names() == []
    conv.append_event("user", "one")
    assert [name for _, _, name in conv.known_event_names()] == ["0001-user.md"]

    def settled() -> bool:
        st = os.stat(conv.events_dir)
        return max(st.st_mtime_ns, st.st_ctime_ns) < time.time_ns() - 200_000_000

    wait_until(settled, timeout=3, message="events/ to settle")
    (conv.events_dir / "0002-tool.md").write_text("by hand\n")
    assert [name for _, _, name in conv.known_event_names()][-1] == "0002-tool.md"
