"""Shared fixtures: real git repositories in tmp_path, identity pinned, a real CLI."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.messages_server import messages_server  # noqa: F401  (fixture)


def pytest_configure(config: pytest.Config) -> None:
    # Nothing global is filled here: a test that runs agents builds its runners as the
    # library does (jpfs.api.runner, on jpfs.api.app).
    config.addinivalue_line(
        "markers",
        "slow: starts a daemon, an MCP server, a network server (git, SSH, the API "
        "servers) or npm, or is a property test; left out of `make test-fast` (-m 'not "
        "slow'); found by tests/tiers.py",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests that need a process or a server ``slow`` (tests/tiers.py)."""
    from tests.tiers import mark_slow

    mark_slow(items)


IDENTITY = {
    "GIT_AUTHOR_NAME": "Test User",
    "GIT_AUTHOR_EMAIL": "user@example.com",
    "GIT_COMMITTER_NAME": "Test User",
    "GIT_COMMITTER_EMAIL": "user@example.com",
}


@pytest.fixture(autouse=True)
def _isolated_git(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test sees the machine's git config, HOME or API keys."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Test User\n\temail = user@example.com\n"
        "[init]\n\tdefaultBranch = main\n[commit]\n\tgpgsign = false\n",
        encoding="utf-8",
    )
    for key, value in IDENTITY.items():
        monkeypatch.setenv(key, value)
    for key in list(os.environ):
        if key.startswith(("JPFS_", "ANTHROPIC_", "OPENAI_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("NO_COLOR", "1")


def git(cwd: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout


def rgit(ws: Path, *args: str, check: bool = True) -> str:
    """git in the record worktree (``conversations/``, branch ``jpfs-record``): paths
    there are relative to the conversation root (``r1/task.md``)."""
    return git(ws / "conversations", *args, check=check)


@pytest.fixture
def repo(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path / "repo"
    copy_repo(_template("repo", tmp_path_factory), path)
    return path


# `git init` (and `jpfs init`, for `ws`) run once per test process, into templates that
# each test gets a copy of: hundreds of tests start from them, and a copy costs a few ms
# against ~35 ms for the repository and ~110 ms more for the workspace. A copy is what
# init made, file for file, but for its stat data (inodes, ctimes: git and jpfs's
# caches look at such files again) and the two files that name the record's linked
# worktree by its absolute path, written again for the copy.
_TEMPLATES: dict[str, Path] = {}


def _template(kind: str, factory: pytest.TempPathFactory) -> Path:
    if kind not in _TEMPLATES:
        path = factory.mktemp(f"template-{kind}") / "repo"
        if kind == "repo":
            path.mkdir()
            git(path, "init", "-q", "-b", "main")
            (path / "README.md").write_text("# project\n", encoding="utf-8")
            git(path, "add", "README.md")
            git(path, "commit", "-q", "-m", "initial")
        else:
            copy_repo(_template("repo", factory), path)
            with pytest.MonkeyPatch.context() as env:  # made as `ws` was: no jpfs settings
                for key in [k for k in os.environ if k.startswith("JPFS_")]:
                    env.delenv(key)
                result = run_cli(path, "init")
            assert result.code == 0, result.stderr
        _TEMPLATES[kind] = path
    return _TEMPLATES[kind]


def copy_repo(src: Path, dst: Path) -> None:
    """The repository and work trees at ``src`` copied to ``dst``, its linked worktrees
    (the record's ``conversations/``) linked to the copy."""
    shutil.copytree(src, dst, symlinks=True)
    admins = dst / ".git" / "worktrees"
    for admin in admins.iterdir() if admins.is_dir() else ():
        dotgit = dst / Path((admin / "gitdir").read_text(encoding="utf-8").strip()).relative_to(src)
        (admin / "gitdir").write_text(f"{dotgit}\n", encoding="utf-8")
        dotgit.write_text(f"gitdir: {admin}\n", encoding="utf-8")


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(repo: Path) -> Callable[..., Result]:
    """Run the jpfs CLI in-process (``main(argv)``), stdout/stderr captured, in ``repo``."""

    def run(*args: str, cwd: Path | None = None, stdin: str = "") -> Result:
        return run_cli(cwd or repo, *args, stdin=stdin)

    return run


def run_cli(cwd: Path, *args: str, stdin: str = "") -> Result:
    from jpfs.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    old = Path.cwd()
    os.chdir(cwd)
    old_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        sys.stdin = old_stdin
        os.chdir(old)
    return Result(code, out.getvalue(), err.getvalue())


@pytest.fixture
def ws(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``repo`` after ``jpfs init`` (a copy of the template's)."""
    shutil.rmtree(repo)
    copy_repo(_template("ws", tmp_path_factory), repo)
    return repo


def jpfs_subprocess(
    *args: str,
    cwd: Path,
    input: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """The real console entry point in a separate process."""
    return subprocess.run(
        [sys.executable, "-m", "jpfs", *args],
        cwd=cwd, capture_output=True, text=True, input=input, timeout=timeout,
        env={**os.environ, **(env or {})}, check=False,
    )  # fmt: skip


@contextlib.contextmanager
def running_daemon(ws: Path) -> Iterator[Path]:
    """``jpfs daemon start`` in ``ws``, and always ``jpfs daemon stop --force`` after; a
    daemon that did not stop within its timeout fails the test (and is killed, so that
    the suite leaves no jpfs process behind)."""
    started = jpfs_subprocess("daemon", "start", cwd=ws)
    assert started.returncode == 0, started.stderr
    pid = daemon_pid(ws)
    try:
        yield ws
    finally:
        stopped = jpfs_subprocess("daemon", "stop", "--force", "--timeout", "20", cwd=ws)
        # `stop` returns once the process is gone (protocol/daemon.md), not only its lock:
        # every test that starts a daemon checks that too.
        alive = pid is not None and process_alive(pid)
        if alive:
            assert pid is not None
            os.kill(pid, 9)
        assert stopped.returncode == 0 and not alive, f"the daemon did not stop: {stopped.stderr}"


def daemon_pid(ws: Path) -> int | None:
    try:
        text = (ws / ".jpfs" / "local" / "daemon.pid").read_text(encoding="ascii")
    except OSError:
        return None
    return int(text.split()[0]) if text.strip() else None


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not reaped, does not count)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def daemon_log_tail(ws: Path, lines: int = 60) -> str:
    """The last ``lines`` of ``ws``'s daemon log, for a failed wait to say what the
    daemon was doing ("" when it wrote none)."""
    log = ws / ".jpfs" / "local" / "daemon.log"
    if not log.exists():
        return ""
    return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


def wait_until(
    predicate: Callable[[], object],
    timeout: float = 10.0,
    interval: float = 0.01,
    message: str = "condition",
) -> object:
    """Poll ``predicate`` until truthy or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    event = threading.Event()
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        event.wait(interval)


def assert_fsck_clean(repo: Path, *flags: str, timeout: float = 60.0) -> str:
    """``git fsck`` passes; its output.

    A live daemon may roll packs up while fsck reads them, and fsck then reports a
    pack whose index it can no longer open (git's own repack does the same to it); or
    commit while fsck runs, and fsck, having listed the objects first, reads a reflog
    naming a commit it did not list ("invalid reflog entry"). A failure is retried only
    when the packs or the refs changed during that fsck, so a lasting fault still
    fails, and only until ``timeout``.
    """
    pack_dir = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir").strip())
    pack_dir = pack_dir / "objects" / "pack"
    deadline = time.monotonic() + timeout

    def state() -> tuple[list[tuple[str, int, int]], str]:
        # Every file of the pack directory, by name, inode and size: a roll-up removes a
        # pack's .pack before its .idx (git's order), and writes new ones beside them.
        files = []
        for entry in os.scandir(pack_dir):
            with contextlib.suppress(FileNotFoundError):
                stat = entry.stat()
                files.append((entry.name, stat.st_ino, stat.st_size))
        return sorted(files), git(repo, "for-each-ref")

    while True:
        before = state()
        proc = subprocess.run(
            ["git", "fsck", "--no-progress", *flags],
            cwd=repo,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode == 0:
            return proc.stdout + proc.stderr
        if state() == before or time.monotonic() > deadline:
            raise AssertionError(f"git fsck in {repo}: {proc.stdout}{proc.stderr}")


@contextlib.contextmanager
def no_thread_leak() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    wait_until(
        lambda: not [t for t in set(threading.enumerate()) - before if t.is_alive()],
        timeout=5,
        message="threads started by the test to end",
    )


def write_profile(ws: Path, name: str, text: str, *, allowed: bool = False) -> Path:
    """Add an agent profile to a test workspace. ``allowed``: name it in
    ``agents.allowed`` too, as a user must for the CLI or the library to start it at the
    top level (a profile only other agents start needs not be)."""
    path = ws / ".jpfs" / "agents" / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    if allowed:
        allow_agents(ws, name)
    return path


def allow_agents(ws: Path, *names: str) -> None:
    """Add ``names`` to the workspace's ``agents.allowed`` (its file, as ``jpfs config
    set`` would), keeping the profiles already there."""
    from jpfs.core.config import SCHEMA, set_in_file

    config = ws / ".jpfs" / "config.toml"
    table = tomllib.loads(config.read_text(encoding="utf-8")).get("agents", {})
    current = [str(n) for n in table.get("allowed", SCHEMA["agents.allowed"].default)]
    set_in_file(config, "agents.allowed", json.dumps(list(dict.fromkeys([*current, *names]))))


def use_only_agent(ws: Path, name: str, text: str) -> None:
    """Make ``name`` (a profile with ``text``) the workspace's one agent: the default
    and the only one allowed, committed as a user would."""
    from jpfs.core.config import set_in_file

    write_profile(ws, name, text)
    config = ws / ".jpfs" / "config.toml"
    set_in_file(config, "conversations.default_agent", f'"{name}"')
    set_in_file(config, "agents.allowed", f'["{name}"]')
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", f"the {name} agent")


@pytest.fixture
def api_env(messages_server, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The real anthropic SDK pointed at the local Messages API server."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", messages_server.url)
    return messages_server


def share_record(tmp_path: Path, ws: Path, cli: Callable[..., Result], **keys: str) -> Path:
    """A bare remote for ``ws``'s project with ``sync.remote = "origin"`` (and any other
    ``sync.*`` keys) committed, and the record pushed there by ``jpfs sync``."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(ws, "remote", "add", "origin", str(remote))
    assert cli("config", "set", "sync.remote", "origin").code == 0
    for key, value in keys.items():
        assert cli("config", "set", f"sync.{key}", value).code == 0
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "share the record")
    git(ws, "push", "-q", "origin", "main")
    done = cli("sync")
    assert done.code == 0, done.stderr
    return remote


def held_leases(remote: Path) -> list[str]:
    """The lease refs on ``remote`` some machine holds. A released lease stays as a
    tombstone naming the record that holds the work done under it (``Jpfs-Released``)
    until a daemon sweeps it."""
    listed = git(
        remote,
        "for-each-ref",
        "--format=%(refname) %(trailers:key=Jpfs-Released,valueonly,separator=)",
        "refs/jpfs/leases/",
    )
    held = []
    for line in listed.splitlines():
        ref, _, released = line.partition(" ")
        if not released.strip():
            held.append(ref)
    return held


def clone_sharing(remote: Path, path: Path, cli: Callable[..., Result]) -> Path:
    """A clone of ``remote`` whose record is attached by ``jpfs sync``."""
    git(remote.parent, "clone", "-q", str(remote), str(path))
    done = cli("sync", cwd=path)
    assert done.code == 0, done.stderr
    return path


@pytest.fixture(scope="session", autouse=True)
def _no_jpfs_left_behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The suite leaves no jpfs process behind: at the end of a session (of each worker),
    a jpfs process still running in one of its workspaces fails it, and is killed."""
    yield
    # With a separator: another session's base (pytest-12 beside pytest-123) is not ours.
    base = os.path.join(str(tmp_path_factory.getbasetemp()), "")
    left = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        text = b" ".join(argv).decode("utf-8", "replace")
        if "jpfs" in text and base in text and process_alive(int(entry)):
            left.append(text)
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry), 9)
    assert not left, "jpfs processes left running by the suite: " + "; ".join(left)


_GREP_LINE = re.compile(r"^(?P<id>[^:]+):(?P<file>[^:]+):(?P<line>\d+): (?P<text>.*)$")


def grep_brief(stdout: str) -> list[str]:
    """``jpfs conversation grep``'s ``ID:FILE:LINE: text`` lines as ``ID: text`` (what
    most tests compare); a line of another shape fails the test."""
    out = []
    for line in stdout.splitlines():
        found = _GREP_LINE.match(line)
        assert found, f"not an ID:FILE:LINE: text line: {line!r}"
        out.append(f"{found['id']}: {found['text']}")
    return out
