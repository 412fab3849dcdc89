"""The record on its own branch: jpfs never writes the user's branch, index or locks.

Every test uses real git repositories laid out the way users have them (split and
sparse indexes, untracked cache, linked worktrees, a bare repository with worktrees,
clones) and checks both sides: the record (``jpfs-record`` at ``conversations/``) got
the work, and the user's branch, index and lock files are exactly as the user left them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Result, git, jpfs_subprocess, rgit, running_daemon, wait_until


def index_digest(repo: Path) -> str:
    gitdir = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-dir").strip())
    return hashlib.sha256((gitdir / "index").read_bytes()).hexdigest()


def new_conversation(cli: Callable[..., Result], conv_id: str, cwd: Path | None = None) -> None:
    result = cli("conversation", "new", conv_id, "--no-activate", cwd=cwd)
    assert result.code == 0, result.stderr


def record_subjects(ws: Path, *paths: str) -> list[str]:
    return rgit(ws, "log", "--format=%s", "--", *paths).splitlines()


def test_init_creates_the_record_worktree_and_commits_nothing_on_the_users_branch(
    repo: Path, cli: Callable[..., Result]
) -> None:
    head = git(repo, "rev-parse", "HEAD")
    index = index_digest(repo)
    result = cli("init")
    assert result.code == 0, result.stderr
    assert "jpfs-record" in result.stderr and "git add" in result.stderr
    assert git(repo, "rev-parse", "HEAD") == head
    assert index_digest(repo) == index  # nothing staged either
    status = git(repo, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert sorted(status) == sorted(
        ["?? .gitignore"] + [f"?? .jpfs/{p}" for p in ("config.toml", *agents(repo))]
    )
    ignore = (repo / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert "/conversations/" in ignore and "/.jpfs/local/" in ignore
    conv = repo / "conversations"
    assert (conv / ".git").is_file() and (conv / "README.md").is_file()
    assert rgit(repo, "symbolic-ref", "HEAD").strip() == "refs/heads/jpfs-record"
    assert rgit(repo, "status", "--porcelain") == ""
    assert rgit(repo, "config", "--worktree", "core.sparseCheckout").strip() == "false"
    assert cli("init").code == 0  # harmless to run twice
    assert git(repo, "rev-parse", "HEAD") == head


def agents(repo: Path) -> list[str]:
    return sorted(f"agents/{p.name}" for p in (repo / ".jpfs" / "agents").iterdir())


def test_conversation_commits_land_on_the_record_with_record_relative_paths(
    ws: Path, cli: Callable[..., Result]
) -> None:
    head = git(ws, "rev-parse", "HEAD")
    index = index_digest(ws)
    new_conversation(cli, "refactor")
    assert git(ws, "rev-parse", "HEAD") == head and index_digest(ws) == index
    assert rgit(ws, "ls-tree", "--name-only", "HEAD", "refactor/").split() == [
        "refactor/conversation.toml"
    ]
    # Both ways of reading a conversation's history the protocol documents.
    assert record_subjects(ws, "refactor")[0].startswith("jpfs(refactor): ")
    assert git(ws / "conversations" / "refactor", "log", "--format=%s", ".").startswith("jpfs(")
    trailers = rgit(ws, "log", "-1", "--format=%(trailers:key=Jpfs-Conversation,valueonly)")
    assert trailers.strip() == "refactor"
    assert rgit(ws, "status", "--porcelain") == ""
    assert "refactor" in cli("log", "refactor").stdout


def test_split_index_survives_init_activity_and_a_user_commit(
    repo: Path, cli: Callable[..., Result]
) -> None:
    git(repo, "config", "core.splitIndex", "true")
    git(repo, "update-index", "--split-index")
    assert cli("init").code == 0
    new_conversation(cli, "a")
    assert git(repo, "status", "--porcelain", "--", ".jpfs", ".gitignore").count("??") >= 2
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "x")
    tracked = git(repo, "ls-tree", "-r", "--name-only", "HEAD").split()
    assert ".jpfs/config.toml" in tracked
    assert not any(p.startswith("conversations/") for p in tracked)
    new_conversation(cli, "b")
    git(repo, "commit", "-q", "--allow-empty", "-m", "y")
    assert ".jpfs/config.toml" in git(repo, "ls-tree", "-r", "--name-only", "HEAD").split()
    assert rgit(repo, "ls-tree", "--name-only", "HEAD").split() == [
        ".gitignore",
        "README.md",
        "a",
        "b",
    ]
    assert git(repo, "status", "--porcelain") == ""
    assert any(p.name.startswith("sharedindex.") for p in (repo / ".git").iterdir())
    # The record's worktree inherits the setting: jpfs writes its index split too.
    record_gitdir = repo / ".git" / "worktrees" / "conversations"
    assert any(p.name.startswith("sharedindex.") for p in record_gitdir.iterdir())
    assert rgit(repo, "status", "--porcelain") == ""


def test_sparse_checkout_and_sparse_index_do_not_reach_the_record(
    repo: Path, cli: Callable[..., Result]
) -> None:
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("x = 1\n", encoding="utf-8")
    (repo / "docs").mkdir()
    (repo / "docs" / "guide.md").write_text("guide\n", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "tree")
    git(repo, "sparse-checkout", "init", "--cone", "--sparse-index")
    git(repo, "sparse-checkout", "set", "src")
    # The shared config, as older gits and some tools leave it.
    git(repo, "config", "core.sparseCheckout", "true")
    assert not (repo / "docs").exists()
    assert cli("init").code == 0
    new_conversation(cli, "s")
    assert (repo / "conversations" / "s" / "conversation.toml").is_file()
    assert (repo / "conversations" / "README.md").is_file()
    assert rgit(repo, "status", "--porcelain") == ""
    assert not (repo / "docs").exists()  # the user's sparse checkout is as it was
    assert git(repo, "sparse-checkout", "list").split() == ["src"]
    git(repo, "add", "--sparse", "-A", ".jpfs", ".gitignore")
    git(repo, "commit", "-q", "-m", "jpfs")
    assert "docs/guide.md" in git(repo, "ls-tree", "-r", "--name-only", "HEAD").split()


def test_untracked_cache_and_the_users_staging_are_never_touched(
    repo: Path, cli: Callable[..., Result]
) -> None:
    git(repo, "config", "core.untrackedCache", "true")
    git(repo, "update-index", "--untracked-cache")
    assert cli("init").code == 0
    (repo / "staged.txt").write_text("staged\n", encoding="utf-8")
    git(repo, "add", "staged.txt")
    git(repo, "status", "--porcelain")  # fills the untracked cache
    before = index_digest(repo)
    assert b"UNTR" in (repo / ".git" / "index").read_bytes()
    for name in ("u1", "u2", "u3"):
        new_conversation(cli, name)
    assert index_digest(repo) == before
    assert "A  staged.txt" in git(repo, "status", "--porcelain").splitlines()


def test_a_live_index_lock_is_left_alone_by_the_daemon(
    repo: Path, cli: Callable[..., Result]
) -> None:
    """``git commit`` holds index.lock while its editor is open; jpfs never removes it."""
    assert cli("init").code == 0
    lock = repo / ".git" / "index.lock"
    lock.write_bytes(b"")
    os.utime(lock, (0, 0))  # old enough to look abandoned
    inode = lock.stat().st_ino
    started = jpfs_subprocess("daemon", "start", cwd=repo)
    try:
        assert started.returncode == 0, started.stderr
        conv = repo / "conversations" / "locked"
        conv.mkdir()
        (conv / "task.md").write_text("Say hello.\n", encoding="utf-8")
        wait_until(
            lambda: "locked/task.md" in rgit(repo, "ls-tree", "-r", "--name-only", "HEAD"),
            timeout=20,
            message="the daemon to commit the task on the record",
        )
        assert lock.exists() and lock.stat().st_ino == inode
    finally:
        jpfs_subprocess("daemon", "stop", "--force", "--timeout", "20", cwd=repo)
    assert lock.exists() and lock.stat().st_ino == inode
    lock.unlink()


def test_bare_repository_with_worktrees(tmp_path: Path, cli: Callable[..., Result]) -> None:
    bare = tmp_path / "project.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    main = tmp_path / "main"
    git(bare, "worktree", "add", "-q", "--orphan", "-b", "main", str(main), check=False)
    if not (main / ".git").exists():  # git < 2.42 has no --orphan: seed a first commit
        seed = tmp_path / "seed"
        git(tmp_path, "clone", "-q", str(bare), str(seed))
        (seed / "README.md").write_text("x\n", encoding="utf-8")
        git(seed, "add", "README.md")
        git(seed, "commit", "-q", "-m", "initial")
        git(seed, "push", "-q", "origin", "HEAD:main")
        git(bare, "worktree", "add", "-q", str(main), "main")
    assert cli("init", cwd=main).code == 0
    new_conversation(cli, "bare-one", cwd=main)
    assert "refs/heads/jpfs-record" in git(bare, "for-each-ref", "--format=%(refname)")
    assert record_subjects(main, "bare-one")
    assert git(bare, "config", "--bool", "core.bare").strip() == "true"
    assert git(main, "rev-parse", "--is-bare-repository").strip() == "false"
    assert rgit(main, "status", "--porcelain") == ""


def test_a_second_worktree_of_the_repository_shares_the_one_record(
    ws: Path, cli: Callable[..., Result], tmp_path: Path
) -> None:
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "jpfs")
    new_conversation(cli, "shared")
    other = tmp_path / "feature"
    git(ws, "worktree", "add", "-q", "-b", "feature", str(other))
    listed = cli("conversation", "ls", "--format", "json", cwd=other)
    assert listed.code == 0, listed.stderr
    assert "shared" in listed.stdout
    new_conversation(cli, "from-feature", cwd=other)
    assert (ws / "conversations" / "from-feature" / "conversation.toml").is_file()
    assert not (other / "conversations").exists()
    assert git(ws, "for-each-ref", "--format=%(refname)", "refs/heads/").split() == [
        "refs/heads/feature",
        "refs/heads/jpfs-record",
        "refs/heads/main",
    ]


def test_a_deleted_conversation_root_and_a_moved_repository_are_repaired(
    ws: Path, cli: Callable[..., Result], tmp_path: Path
) -> None:
    new_conversation(cli, "keep")
    shutil.rmtree(ws / "conversations")
    new_conversation(cli, "after-delete")
    assert (ws / "conversations" / "keep" / "conversation.toml").is_file()
    assert rgit(ws, "status", "--porcelain") == ""
    moved = tmp_path / "moved"
    ws.rename(moved)
    new_conversation(cli, "after-move", cwd=moved)
    assert rgit(moved, "status", "--porcelain") == ""
    assert {"keep", "after-delete", "after-move"} <= set(
        rgit(moved, "ls-tree", "--name-only", "HEAD").split()
    )
    git(moved, "gc", "-q", "--prune=now")
    git(moved, "worktree", "prune")
    new_conversation(cli, "after-gc", cwd=moved)
    fsck = subprocess.run(
        ["git", "fsck", "--strict"], cwd=moved, capture_output=True, text=True, check=False
    )
    assert fsck.returncode == 0, fsck.stderr


def test_a_fresh_clone_reattaches_the_record_from_the_remote(
    ws: Path, cli: Callable[..., Result], tmp_path: Path
) -> None:
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "jpfs")
    new_conversation(cli, "travels")
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(ws, "push", "-q", str(remote), "main", "jpfs-record")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(remote), str(clone))
    assert not (clone / "conversations").exists()
    assert cli("init", cwd=clone).code == 0
    assert (clone / "conversations" / "travels" / "conversation.toml").is_file()
    assert git(clone, "rev-parse", "jpfs-record") == git(ws, "rev-parse", "jpfs-record")


def test_a_sha256_repository_is_refused_with_a_message_that_says_so(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    repo = tmp_path / "sha256"
    repo.mkdir()
    git(repo, "init", "-q", "--object-format=sha256")
    result = cli("init", cwd=repo)
    assert result.code == 1
    assert "SHA256" in result.stderr and "SHA-1" in result.stderr


def test_the_old_layout_is_refused_and_migrate_moves_it_with_its_history(
    repo: Path, cli: Callable[..., Result]
) -> None:
    # The layout before the record branch: conversations committed on the user's branch.
    old = repo / ".jpfs"
    old.mkdir()
    from jpfs.services.workspace.bootstrap import template_agents, template_text

    (old / "config.toml").write_text(template_text("config.toml"), encoding="utf-8")
    (old / "agents").mkdir()
    for name in template_agents():
        (old / "agents" / name).write_text(template_text("agents", name), encoding="utf-8")
    conv = repo / "conversations" / "legacy"
    conv.mkdir(parents=True)
    (conv / "task.md").write_text("Old task.\n", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "jpfs(legacy): task\n\nJpfs-Conversation: legacy")
    (conv / "result.md").write_text("Old result.\n", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "jpfs(legacy): result\n\nJpfs-Conversation: legacy")
    (repo / "code.py").write_text("x = 1\n", encoding="utf-8")
    git(repo, "add", "code.py")
    git(repo, "commit", "-q", "-m", "user work")
    refused = cli("conversation", "new", "fresh")
    assert refused.code == 1 and "jpfs migrate" in refused.stderr
    migrated = cli("migrate")
    assert migrated.code == 0, migrated.stderr
    assert record_subjects(repo) == ["jpfs(legacy): result", "jpfs(legacy): task"]
    assert rgit(
        repo, "log", "-1", "--format=%(trailers:key=Jpfs-Conversation,valueonly)"
    ).strip() == ("legacy")
    assert (repo / "conversations" / "legacy" / "result.md").read_text() == "Old result.\n"
    assert rgit(repo, "status", "--porcelain") == ""
    staged = git(repo, "status", "--porcelain").splitlines()
    assert "D  conversations/legacy/task.md" in staged
    git(repo, "commit", "-q", "-am", "jpfs: conversations live on jpfs-record")
    assert new_conversation(cli, "fresh") is None
    assert "fresh" in rgit(repo, "ls-tree", "--name-only", "HEAD").split()


def test_a_human_commit_on_the_record_is_picked_up(ws: Path, cli: Callable[..., Result]) -> None:
    new_conversation(cli, "h")
    (ws / "conversations" / "notes.md").write_text("by hand\n", encoding="utf-8")
    rgit(ws, "add", "notes.md")
    rgit(ws, "commit", "-q", "-m", "a note by hand")
    new_conversation(cli, "after-human")
    log = record_subjects(ws)
    assert log[0].startswith("jpfs(after-human)") and log[1] == "a note by hand"
    assert rgit(ws, "status", "--porcelain") == ""


def test_is_held_never_takes_the_lock(tmp_path: Path) -> None:
    import fcntl

    from jpfs.core import locks

    path = tmp_path / "x.lock"
    path.write_bytes(b"")
    assert not locks.is_held(path)
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert locks.is_held(path)
    finally:
        os.close(fd)
    assert not locks.is_held(path)
    # While a holder exists, asking from here many times never makes a taker fail.
    holder = os.open(path, os.O_RDWR)
    try:
        for _ in range(200):
            assert not locks.is_held(path)
            fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(holder, fcntl.LOCK_UN)
    finally:
        os.close(holder)


@pytest.mark.timeout(240)
def test_fifty_user_commits_while_the_daemon_runs_twenty_conversations(
    ws: Path, cli: Callable[..., Result]
) -> None:
    from tests.services.daemon.test_daemon_helpers import setup_workspace, state_of

    setup_workspace(ws, default_agent="helper", delay=0.02)
    git(ws, "add", ".gitignore")
    git(ws, "commit", "-q", "-m", "ignore jpfs's directories")
    head0 = git(ws, "rev-list", "--count", "HEAD").strip()
    started = jpfs_subprocess("daemon", "start", cwd=ws)
    assert started.returncode == 0, started.stderr
    failed: list[str] = []
    try:
        ids = [f"t{n:02d}" for n in range(20)]
        for n, conv_id in enumerate(ids):
            conv = ws / "conversations" / conv_id
            conv.mkdir()
            (conv / "task.md").write_text(f"Task {n}.\n", encoding="utf-8")
            for k in (2 * n, 2 * n + 1):
                failed += user_commit(ws, k)
        for k in range(40, 50):
            failed += user_commit(ws, k)
        wait_until(
            lambda: all(state_of(ws, c) == "idle" for c in ids),
            timeout=180,
            message="all 20 conversations to finish",
        )
    finally:
        jpfs_subprocess("daemon", "stop", "--force", "--timeout", "20", cwd=ws)
    assert failed == []
    assert int(git(ws, "rev-list", "--count", "HEAD")) == int(head0) + 50
    for k in range(50):
        assert (ws / f"work{k}.txt").read_text() == f"{k}\n"
        assert git(ws, "show", f"HEAD:work{k}.txt") == f"{k}\n"
    for conv_id in ids:
        assert "Helper says hello." in (ws / "conversations" / conv_id / "result.md").read_text()
    assert git(ws, "status", "--porcelain") == ""
    assert rgit(ws, "status", "--porcelain") == ""
    fsck = subprocess.run(
        ["git", "fsck", "--strict"], cwd=ws, capture_output=True, text=True, check=False
    )
    assert fsck.returncode == 0, fsck.stderr


def user_commit(ws: Path, k: int) -> list[str]:
    """One human ``git add`` + ``git commit``; the failure text if either failed."""
    (ws / f"work{k}.txt").write_text(f"{k}\n", encoding="utf-8")
    for args in (["add", f"work{k}.txt"], ["commit", "-q", "-m", f"user work {k}"]):
        proc = subprocess.run(["git", *args], cwd=ws, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            return [f"git {args[0]} {k}: {proc.stderr.strip()}"]
    return []


# -- protocol/record.md, run verbatim ----------------------------------------------------------

DOC = Path(__file__).resolve().parents[3] / "protocol" / "record.md"


def sh_blocks(path: Path) -> list[str]:
    blocks, current = [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        if current is None and line.strip() == "```sh":
            current = []
        elif current is not None and line.strip() == "```":
            blocks.append("\n".join(current) + "\n")
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def run_block(block: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    import sys

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip


def test_the_record_documents_commands_work_as_written(
    ws: Path, cli: Callable[..., Result], tmp_path: Path
) -> None:
    reading, sharing, migrating = sh_blocks(DOC)
    new_conversation(cli, "refactor")
    done = run_block(reading, ws)
    assert done.returncode == 0, done.stderr
    assert "jpfs(refactor): new" in done.stdout and "jpfs: start the record" in done.stdout
    remote = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(ws, "remote", "add", "origin", str(remote))
    done = run_block(sharing, ws)
    assert done.returncode == 0, done.stderr
    assert git(remote, "rev-parse", "jpfs-record") == git(ws, "rev-parse", "jpfs-record")

    old = tmp_path / "old"
    old.mkdir()
    git(old, "init", "-q", "-b", "main")
    (old / ".jpfs").mkdir()
    (old / ".jpfs" / "config.toml").write_text("", encoding="utf-8")
    (old / "conversations" / "x").mkdir(parents=True)
    (old / "conversations" / "x" / "task.md").write_text("Old.\n", encoding="utf-8")
    git(old, "add", "-A")
    git(old, "commit", "-q", "-m", "jpfs(x): task\n\nJpfs-Conversation: x")
    done = run_block(migrating, old)
    assert done.returncode == 0, done.stderr
    assert rgit(old, "log", "--format=%s").splitlines() == ["jpfs(x): task"]
    assert "conversations/x/task.md" not in git(old, "ls-tree", "-r", "--name-only", "HEAD")
    assert git(old, "status", "--porcelain") == ""


def test_the_readme_record_commands_work_as_written(
    ws: Path, cli: Callable[..., Result], tmp_path: Path
) -> None:
    readme = DOC.parent.parent / "README.md"
    (block,) = [b for b in sh_blocks(readme) if "git push origin jpfs-record" in b]
    new_conversation(cli, "readme-demo")
    remote = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(ws, "remote", "add", "origin", str(remote))
    done = run_block(block, ws)
    assert done.returncode == 0, done.stderr
    assert "jpfs(readme-demo): new" in done.stdout
    assert git(remote, "rev-parse", "jpfs-record") == git(ws, "rev-parse", "jpfs-record")


@pytest.mark.parametrize("branch", ["jpfs/record", "a..b", "-x", "record.lock", "a b"])
def test_an_unusable_record_branch_name_is_refused(
    repo: Path, cli: Callable[..., Result], branch: str
) -> None:
    result = cli("--cfg", f"record.branch={branch!r}".replace("'", '"'), "init")
    assert result.code == 1
    assert "record.branch" in result.stderr and "not usable" in result.stderr
    assert "refs/heads/" + branch not in git(repo, "for-each-ref", "--format=%(refname)")


def test_a_custom_record_branch_name_is_used(repo: Path, cli: Callable[..., Result]) -> None:
    assert cli("--cfg", 'record.branch="team-record"', "init").code == 0
    assert rgit(repo, "symbolic-ref", "HEAD").strip() == "refs/heads/team-record"
    # Kept in config.toml: later commands, without --cfg, use the same record.
    assert '[record]\nbranch = "team-record"' in (repo / ".jpfs" / "config.toml").read_text()
    new_conversation(cli, "later")
    assert "jpfs(later): new" in git(repo, "log", "-1", "--format=%s", "team-record")
    assert "refs/heads/jpfs-record" not in git(repo, "for-each-ref", "--format=%(refname)")


def test_a_staged_file_survives_daemon_activity(ws: Path, cli: Callable[..., Result]) -> None:
    from tests.services.daemon.test_daemon_helpers import setup_workspace, state_of

    setup_workspace(ws, default_agent="helper")
    (ws / "staged.txt").write_text("mine\n", encoding="utf-8")
    git(ws, "add", "staged.txt")
    (ws / "README.md").write_text("# unstaged edit\n", encoding="utf-8")
    head, index = git(ws, "rev-parse", "HEAD"), index_digest(ws)
    with running_daemon(ws):
        for name in ("s1", "s2"):
            conv = ws / "conversations" / name
            conv.mkdir()
            (conv / "task.md").write_text("Say hello.\n", encoding="utf-8")
        wait_until(
            lambda: all(state_of(ws, c) == "idle" for c in ("s1", "s2")),
            timeout=60,
            message="both conversations to finish",
        )
    assert git(ws, "rev-parse", "HEAD") == head
    assert index_digest(ws) == index
    status = git(ws, "status", "--porcelain").splitlines()
    assert "A  staged.txt" in status and " M README.md" in status
