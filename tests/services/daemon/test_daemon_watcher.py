"""The watcher (real inotify through watchdog), its filters, and the in-process daemon."""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from jpfs.services.daemon.watcher import (
    CLOSED,
    MOVED_TO,
    Batch,
    Change,
    EditorTemp,
    IgnoredDirs,
    watch,
)
from tests.conftest import Result, no_thread_leak, rgit, wait_until
from tests.services.daemon.test_daemon_helpers import (
    roles,
    serving,
    setup_workspace,
    state_of,
    write_in_place,
    write_renamed,
    write_vim,
)


@pytest.mark.parametrize(
    "name",
    [".task.md.swp", ".answers.md.swx", "4913", "task.md~", ".#task.md", "#task.md#",
     ".task.md.123.jpfs-tmp", "task.md___jb_tmp___", ".goutputstream-AB12", ".DS_Store"],
)  # fmt: skip
def test_editor_files_are_ignored(name: str) -> None:
    assert EditorTemp().ignores(f"a/b/{name}")


@pytest.mark.parametrize("name", ["task.md", "answers.md", "conversation.toml", "notes.txt"])
def test_conversation_files_are_not_ignored(name: str) -> None:
    assert not EditorTemp().ignores(f"a/{name}")
    assert not IgnoredDirs().ignores(f"a/{name}")


def test_git_and_local_state_are_ignored() -> None:
    assert IgnoredDirs().ignores(".git/index")
    assert IgnoredDirs().ignores("x/.jpfs/local/daemon.log")


class Collector:
    """Runs :func:`watch` in a thread, the way the daemon does."""

    def __init__(self, root: Path, debounce: float = 0.05) -> None:
        self.stop = threading.Event()
        self.started = threading.Event()
        self.batches: list[Batch] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, args=(root, debounce))

    def _run(self, root: Path, debounce: float) -> None:
        for batch in watch(root, self.stop, debounce=debounce, started=self.started):
            with self.lock:
                self.batches.append(batch)

    def __enter__(self) -> Collector:
        self.thread.start()
        assert self.started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()

    def changes(self) -> list[Change]:
        with self.lock:
            return [c for b in self.batches for c in b.changes]

    def wait_for(self, predicate: Callable[[list[Change]], bool], message: str) -> None:
        wait_until(lambda: predicate(self.changes()), message=message)


def test_editor_saves_arrive_and_their_temporary_files_do_not(tmp_path: Path) -> None:
    root = tmp_path / "conversations"
    root.mkdir()
    with no_thread_leak(), Collector(root) as seen:
        # A directory made and written at once: its file may predate the watch on it.
        write_in_place(root / "a" / "b" / "task.md", "hello\n")
        seen.wait_for(lambda cs: any(c.path == "a/b/task.md" for c in cs), "task.md")
        write_vim(root / "a" / "b" / "answers.md", "one\n")
        write_vim(root / "a" / "b" / "answers.md", "two\n")
        write_renamed(root / "a" / "notes.md", "x\n")
        seen.wait_for(
            lambda cs: any(c.path == "a/notes.md" and c.kind == MOVED_TO for c in cs), "rename"
        )
        seen.wait_for(
            lambda cs: any(c.path == "a/b/answers.md" and c.kind == CLOSED for c in cs), "close"
        )
    names = {c.path.rsplit("/", 1)[-1] for c in seen.changes()}
    assert not names & {".answers.md.swp", "4913", "answers.md~", ".notes.md.tmp"}, names
    assert {"task.md", "answers.md", "notes.md", "b"} <= names


def test_a_burst_is_one_batch(tmp_path: Path) -> None:
    root = tmp_path / "conversations"
    root.mkdir()
    target = root / "burst.md"
    with no_thread_leak(), Collector(root, debounce=0.3) as seen:
        for n in range(50):
            target.write_text(f"{n}\n")
        seen.wait_for(lambda cs: len(cs) >= 50, "the burst's events")
        with seen.lock:
            batches = len(seen.batches)
    assert batches <= 2, batches  # a burst is debounced, not one wake-up per event


def test_an_inotify_overflow_asks_for_a_rescan(tmp_path: Path) -> None:
    root = tmp_path / "conversations"
    root.mkdir()
    with no_thread_leak(), Collector(root) as seen:
        # watchdog reports a kernel queue overflow only through this log record.
        logging.getLogger("watchdog.observers.inotify_c").warning(
            "Inotify queue overflowed; filesystem events were lost"
        )
        wait_until(lambda: any(b.overflow for b in seen.batches), message="overflow")


def test_the_daemon_in_process_serves_and_stops_without_leaking_threads(ws: Path) -> None:
    from jpfs.core.workspace import open_workspace
    from jpfs.services.daemon.service import Daemon

    setup_workspace(ws, default_agent="lead")
    with no_thread_leak(), serving(Daemon(open_workspace(ws))) as daemon:
        assert daemon.ready.wait(20)
        (ws / "conversations" / "x").mkdir()
        write_in_place(ws / "conversations" / "x" / "task.md", "Hello.\n")
        wait_until(lambda: state_of(ws, "x") == "waiting", message="questions")
        # Someone typing into `cat > task.md`: written, not closed, paused longer than
        # daemon.settle. Nothing may happen until the file is closed.
        (ws / "conversations" / "y").mkdir()
        with (ws / "conversations" / "y" / "task.md").open("w") as typing:
            typing.write("First line")
            typing.flush()
            threading.Event().wait(3 * 0.3)  # a human's pause, not a synchronisation
            assert "jpfs(y)" not in rgit(ws, "log", "--format=%s")
            assert not (ws / "conversations" / "y" / "conversation.toml").exists()
            typing.write(", second line.\n")
        wait_until(lambda: state_of(ws, "y") == "waiting", message="y's questions")
        assert rgit(ws, "show", "HEAD:y/task.md") == "First line, second line.\n"
    assert roles(ws / "conversations" / "x") == []
    assert not (ws / ".jpfs/local/daemon.pid").exists()
    # Only a daemon's own process settles its heap (gc.freeze), never one it shares.
    assert gc.get_freeze_count() == 0


def test_files_written_after_ready_before_the_watch_is_up_are_edits_not_recoveries(
    ws: Path, cli: Callable[..., Result]
) -> None:
    """Ready comes before the watch (one inotify watch per directory: O(record)); what
    is written in between has no event, and the catch-up takes it as the edit it is."""
    from jpfs.core.workspace import open_workspace
    from jpfs.services.daemon.service import Daemon

    setup_workspace(ws, default_agent="lead")
    assert cli("c", "new", "old", "--no-activate").code == 0
    root = ws / "conversations"

    class WritesBeforeTheWatch(Daemon):
        def start_watching(self) -> None:
            assert self.ready.is_set()
            write_in_place(root / "x" / "task.md", "Hello.\n")
            toml = root / "old" / "conversation.toml"
            text = toml.read_text(encoding="utf-8")
            write_in_place(toml, text.replace('title = ""', 'title = "renamed"'))
            super().start_watching()

    with no_thread_leak(), serving(WritesBeforeTheWatch(open_workspace(ws))):
        wait_until(lambda: state_of(ws, "x") == "waiting", message="x's questions")
        wait_until(
            lambda: 'title = "renamed"' in rgit(ws, "show", "HEAD:old/conversation.toml"),
            message="the title edit committed",
        )
    subjects = rgit(ws, "log", "--format=%s").splitlines()
    assert "jpfs(x): task" in subjects
    assert any(s.startswith("jpfs(old): edit") for s in subjects), subjects
    assert not any("recover" in s for s in subjects), subjects
