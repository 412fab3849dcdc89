"""Echoes (jpfs.services.daemon.echoes): the watcher's reports of what a merge wrote are
known by the files' contents, checked against real git's blob ids; anything else, a
save made right after the merge above all, is looked at as before."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jpfs.core.workspace import open_workspace
from jpfs.infra.git import refs
from jpfs.infra.git.refs import Changed
from jpfs.services.daemon.echoes import Echoes
from jpfs.services.daemon.pool import Pool
from jpfs.services.daemon.reconciler import Reconciler
from jpfs.services.daemon.watcher import CLOSED, CREATED, DELETED, MODIFIED, Batch, Change
from tests.conftest import git, jpfs_subprocess, rgit, running_daemon, wait_until
from tests.services.sync.test_sync_machines import clone, seed_remote


def merged(root: Path, files: dict[str, str]) -> list[Changed]:
    """``files`` written and committed in ``root``, as a merge would have brought them:
    the entries ``refs.changed_files`` gives, compared with git's own blob ids."""
    before = git(root, "rev-parse", "HEAD").strip()
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "a peer's record")
    changed = refs.changed_files(root, before, git(root, "rev-parse", "HEAD").strip())
    for entry in changed:  # the ids are git's (dulwich's compat rule: checked against git)
        assert entry.blob == git(root, "hash-object", entry.path).strip()
    return changed


@pytest.fixture
def root(ws: Path) -> Path:
    return open_workspace(ws).conv_root


def test_a_file_as_the_merge_wrote_it_is_an_echo_each_time_it_is_reported(root: Path) -> None:
    echoes = Echoes(root)
    echoes.expect(merged(root, {"done/result.md": "Done.\n", "done/transcript.md": "t\n"}))
    for kind in (CREATED, MODIFIED, CLOSED):
        assert echoes.heard("done/result.md", kind, False)
    assert not echoes.heard("done/result.md", DELETED, False)  # a deletion is looked at
    assert not echoes.heard("done/other.md", CLOSED, False)  # not the merge's
    assert echoes.heard("done", CREATED, True)  # every file under it is the merge's


def test_a_save_after_the_merge_is_no_echo_and_the_file_is_forgotten(root: Path) -> None:
    echoes = Echoes(root)
    echoes.expect(merged(root, {"done/result.md": "Done.\n"}))
    (root / "done" / "result.md").write_text("Edited by hand.\n", encoding="utf-8")
    assert not echoes.heard("done/result.md", CLOSED, False)
    (root / "done" / "result.md").write_text("Done.\n", encoding="utf-8")
    assert not echoes.heard("done/result.md", CLOSED, False)  # forgotten: looked at as before


def test_a_mode_change_or_a_missing_file_is_no_echo(root: Path) -> None:
    echoes = Echoes(root)
    echoes.expect(merged(root, {"tool/run.sh": "echo hi\n", "tool/notes.md": "n\n"}))
    (root / "tool" / "run.sh").chmod(0o755)
    assert not echoes.heard("tool/run.sh", CLOSED, False)
    (root / "tool" / "notes.md").unlink()
    assert not echoes.heard("tool/notes.md", CLOSED, False)


def test_a_directory_with_a_file_the_merge_did_not_write_is_no_echo(root: Path) -> None:
    echoes = Echoes(root)
    echoes.expect(merged(root, {"job/task.md": "# Job\n"}))
    (root / "job" / "draft.md").write_text("mine\n", encoding="utf-8")
    assert not echoes.heard("job", CREATED, True)
    assert not echoes.heard("elsewhere", CREATED, True)


def test_a_deletion_by_a_merge_and_the_bound_on_what_is_kept(root: Path) -> None:
    echoes = Echoes(root, keep=4)
    echoes.expect(merged(root, {f"n/{i}.md": f"{i}\n" for i in range(6)}))
    assert [echoes.heard(f"n/{i}.md", CLOSED, False) for i in range(6)] == [False] * 4 + [True] * 2
    echoes.expect([Changed("n/5.md", True, "0" * 40, 0)])
    assert not echoes.heard("n/5.md", CLOSED, False)


@pytest.fixture
def reconciler(ws: Path) -> Iterator[Reconciler]:
    pool = Pool(1, lambda job: None, lambda conv_id: None)
    try:
        yield Reconciler(open_workspace(ws), pool, debounce=0.05, settle=0.3, scan_interval=30.0)
    finally:
        pool.stop()
        assert pool.join(5.0)


def test_the_watchers_reports_of_a_merge_bring_no_second_look(
    root: Path, reconciler: Reconciler
) -> None:
    before = git(root, "rev-parse", "HEAD").strip()
    merged(root, {"asked/task.md": "# Hi\n", "done/result.md": "Done.\n"})
    reconciler.record_moved(before, git(root, "rev-parse", "HEAD").strip())
    reconciler.handle(reconciler.inbox.get_nowait())
    assert sorted(reconciler.due) == ["asked"]  # what calls for work, at once
    reconciler.due.clear()
    reports = [Change("asked", CREATED, True), Change("done", CREATED, True)]
    for rel in ("asked/task.md", "done/result.md"):
        reports += [Change(rel, kind) for kind in (CREATED, MODIFIED, CLOSED)]
    reconciler.handle(Batch(reports))
    assert reconciler.due == {}
    (root / "done" / "result.md").write_text("Edited by hand.\n", encoding="utf-8")
    reconciler.handle(Batch([Change("done/result.md", CLOSED), Change("asked/task.md", DELETED)]))
    assert sorted(reconciler.due) == ["asked", "done"]  # a save, and a deletion
    assert all(due <= time.monotonic() for due in reconciler.due.values())


def test_a_save_right_after_a_peers_merge_is_committed(tmp_path: Path) -> None:
    """A real daemon sharing a record: a peer's file arrives by merge, and a human saves
    over it at once (before the watcher's reports of the merge are in, or after): the
    save is committed and reaches the remote."""
    remote = seed_remote(tmp_path, lease=8.0)
    daemon, writer = clone(remote, tmp_path / "d1"), clone(remote, tmp_path / "writer")
    notes = Path("conversations", "notes", "files")

    def save_over_a_merge(n: int) -> None:
        name, theirs, ours = f"n-{n}.md", f"from the peer {n}\n", f"edited here {n}\n"
        (writer / notes).mkdir(parents=True, exist_ok=True)
        (writer / notes / name).write_text(theirs, encoding="utf-8")
        assert jpfs_subprocess("sync", cwd=writer).returncode == 0
        here = daemon / notes / name
        wait_until(
            lambda: here.exists() and here.read_text(encoding="utf-8") == theirs,
            timeout=30,
            message=f"{name} merged",
        )
        here.write_text(ours, encoding="utf-8")
        wait_until(
            lambda: git(remote, "show", f"jpfs-record:notes/files/{name}", check=False) == ours,
            timeout=30,
            message=f"the save over the merged {name} on the remote",
        )

    with running_daemon(daemon):
        for n in range(3):
            save_over_a_merge(n)
    assert "edited here 2" in rgit(daemon, "show", "HEAD:notes/files/n-2.md")
