"""Tests for jpfs.infra.committer against real git repositories, verified with the git CLI."""

from __future__ import annotations

import functools
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest
from pygit2.enums import ConfigLevel

import jpfs
import jpfs.infra.committer.core as committer_core
import jpfs.infra.committer.indexfile as indexfile
from jpfs.errors import GitError, ScopeError
from jpfs.infra.committer import Change, Committer, Identity
from tests.conftest import wait_until

PROJECT_ROOT = Path(jpfs.__file__).resolve().parent.parent
USER = ("Ann User", "ann@example.com")


@pytest.fixture(autouse=True)
def _isolated_git(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    # Keep the developer's global git config (signing, hooks, identity) out of the tests.
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("AUTHOR", "COMMITTER"):
        monkeypatch.delenv(f"GIT_{var}_NAME", raising=False)
        monkeypatch.delenv(f"GIT_{var}_EMAIL", raising=False)
    # libgit2 fixed its config search path when pygit2 was imported.
    paths = pygit2.settings.search_path
    for level in (ConfigLevel.GLOBAL, ConfigLevel.XDG, ConfigLevel.SYSTEM):
        request.addfinalizer(functools.partial(paths.__setitem__, level, paths[level]))
        paths[level] = str(home)


def git(repo: Path, *args: str, check: bool = True) -> str:
    result = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def init_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", USER[0])
    git(path, "config", "user.email", USER[1])
    git(path, "config", "gc.auto", "0")
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = init_repo(tmp_path / "repo")
    (path / "README").write_text("readme\n")
    git(path, "add", "README")
    git(path, "commit", "-q", "-m", "initial")
    return path


@pytest.fixture
def committer(repo: Path) -> Iterator[Committer]:
    with Committer(repo) as c:
        yield c


def write(repo: Path, rel: str, text: str) -> str:
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return rel


def changed_paths(repo: Path, sha: str) -> set[str]:
    out = git(repo, "diff-tree", "--root", "--no-commit-id", "-r", "--name-only", sha)
    return set(out.split())


def assert_consistent(repo: Path, *, clean: bool = True) -> None:
    """fsck is clean; the index agrees with HEAD (so cache-tree was invalidated right)."""
    fsck = subprocess.run(["git", "fsck", "--strict"], cwd=repo, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr
    if clean:
        assert git(repo, "status", "--porcelain") == ""
        assert git(repo, "write-tree").strip() == git(repo, "rev-parse", "HEAD^{tree}").strip()


def trailer_values(repo: Path, key: str) -> list[str]:
    out = git(repo, "log", f"--format=%(trailers:key={key},valueonly)")
    return [line for line in out.splitlines() if line]


# ---------------------------------------------------------------------------- messages


def test_subject_trailers_and_default_author(repo: Path, committer: Committer) -> None:
    write(repo, "conversations/refactor/task.md", "do it\n")
    sha = committer.commit(
        Change(
            ("conversations/refactor",),
            "jpfs(refactor): task",
            (("Jpfs-Conversation", "refactor"), ("Jpfs-Event", "task")),
        )
    )
    assert sha is not None
    assert git(repo, "rev-parse", "HEAD").strip() == sha
    message = git(repo, "log", "-1", "--format=%B", sha)
    assert message.splitlines()[0] == "jpfs(refactor): task"
    parsed = subprocess.run(
        ["git", "interpret-trailers", "--parse"], input=message, capture_output=True, text=True
    ).stdout
    assert parsed == "Jpfs-Conversation: refactor\nJpfs-Event: task\n"
    assert git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", sha).strip() == (
        "Ann User <ann@example.com>|Ann User <ann@example.com>"
    )
    assert git(repo, "log", "-1", "--format=%gs", "-g", "HEAD").strip() == (
        "commit: jpfs(refactor): task"
    )
    assert_consistent(repo)


def test_explicit_author_and_env_committer(
    repo: Path, monkeypatch: pytest.MonkeyPatch, committer: Committer
) -> None:
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Daemon")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "daemon@example.com")
    write(repo, "conversations/a/m.md", "x\n")
    sha = committer.commit(
        Change(("conversations/a/m.md",), "jpfs(a): reply", author=Identity("Bo", "bo@x.org"))
    )
    assert sha is not None
    assert git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", sha).strip() == (
        "Bo <bo@x.org>|Daemon <daemon@example.com>"
    )


def test_fallback_identity_without_config(tmp_path: Path) -> None:
    path = tmp_path / "bare-identity"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    write(path, "conversations/a.md", "a\n")
    with Committer(path) as c:
        sha = c.commit(Change(("conversations/a.md",), "jpfs(a): task"))
    assert sha is not None
    assert git(path, "log", "-1", "--format=%an <%ae>", sha).strip() == "jpfs <jpfs@localhost>"


def test_invalid_change_rejected() -> None:
    with pytest.raises(ValueError):
        Change(("conversations/a",), "two\nlines")
    with pytest.raises(ValueError):
        Change(("conversations/a",), "ok", (("Bad Key", "v"),))
    with pytest.raises(ValueError):
        Change(("conversations/a",), "ok", (("Key", "multi\nline"),))


# ---------------------------------------------------------------------------- snapshots


def test_add_modify_delete_file(repo: Path, committer: Committer) -> None:
    rel = write(repo, "conversations/a/m.md", "one\n")
    first = committer.commit(Change((rel,), "add"))
    assert first is not None
    assert git(repo, "show", f"{first}:{rel}") == "one\n"
    assert changed_paths(repo, first) == {rel}

    write(repo, rel, "two\n")
    (repo / rel).chmod(0o755)
    second = committer.commit(Change((rel,), "modify"))
    assert second is not None
    assert git(repo, "show", f"{second}:{rel}") == "two\n"
    assert git(repo, "ls-tree", second, rel).split()[0] == "100755"
    assert git(repo, "rev-parse", f"{second}^").strip() == first
    assert_consistent(repo)

    (repo / rel).unlink()
    third = committer.commit(Change((rel,), "delete"))
    assert third is not None
    assert git(repo, "ls-tree", "-r", "--name-only", third).split() == ["README"]
    assert committer.commit(Change((rel,), "delete again")) is None
    assert_consistent(repo)


def test_directory_snapshot_and_deletions(repo: Path, committer: Committer) -> None:
    (repo / ".gitignore").write_text("*.tmp\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore")
    for rel in ("a/m1.md", "a/m2.md", "a/sub/deep.md", "b/other.md"):
        write(repo, f"conversations/{rel}", rel)
    write(repo, "conversations/a/scratch.tmp", "ignored")
    os.symlink("m1.md", repo / "conversations/a/link")
    sha = committer.commit(Change(("conversations/a",), "snapshot a"))
    assert sha is not None
    assert changed_paths(repo, sha) == {
        "conversations/a/m1.md",
        "conversations/a/m2.md",
        "conversations/a/sub/deep.md",
        "conversations/a/link",
    }
    assert git(repo, "ls-tree", sha, "conversations/a/link").split()[0] == "120000"

    (repo / "conversations/a/m2.md").unlink()
    (repo / "conversations/a/sub/deep.md").unlink()
    (repo / "conversations/a/sub").rmdir()
    write(repo, "conversations/a/m3.md", "new")
    sha2 = committer.commit(Change(("conversations/a",), "snapshot a again"))
    assert sha2 is not None
    tree = set(git(repo, "ls-tree", "-r", "--name-only", sha2, "conversations").split())
    assert tree == {"conversations/a/m1.md", "conversations/a/m3.md", "conversations/a/link"}

    # Removing the whole directory deletes everything tracked under it.
    for path in sorted((repo / "conversations/a").iterdir()):
        path.unlink()
    (repo / "conversations/a").rmdir()
    sha3 = committer.commit(Change(("conversations/a",), "drop a"))
    assert sha3 is not None
    assert git(repo, "ls-tree", "-r", "--name-only", sha3, "conversations").split() == []
    git(repo, "add", "conversations/b")  # let status be clean for the final check
    git(repo, "commit", "-q", "-m", "b")
    (repo / "conversations/a").mkdir()
    write(repo, "conversations/a/scratch.tmp", "ignored")
    assert_consistent(repo, clean=False)
    assert git(repo, "status", "--porcelain") == ""


def test_missing_path_that_becomes_a_directory(repo: Path, committer: Committer) -> None:
    # Named while missing, later a directory: re-syncing the name must not drop the
    # index entries of the files under it.
    write(repo, "conversations/c/task.md", "t\n")
    paths = ("conversations/c/task.md", "conversations/c/files")
    assert committer.commit(Change(paths, "task, no files yet")) is not None
    rel = write(repo, "conversations/c/files/a.txt", "a\n")
    assert committer.commit(Change(("conversations/c/files",), "dir")) is not None
    assert committer.commit(Change(("conversations/c/files",), "again")) is None
    write(repo, "conversations/c/other.md", "o\n")
    assert committer.commit(Change(("conversations/c/other.md",), "other")) is not None
    assert rel in git(repo, "ls-files")
    assert_consistent(repo)


def test_user_staging_survives_and_status_is_clean(repo: Path, committer: Committer) -> None:
    write(repo, "notes.txt", "staged by the user\n")
    write(repo, "README", "edited and staged\n")
    git(repo, "add", "notes.txt", "README")
    write(repo, "README", "edited again, unstaged\n")
    cached_before = git(repo, "diff", "--cached")
    unstaged_before = git(repo, "diff")

    write(repo, "conversations/c/task.md", "task\n")
    sha = committer.commit(Change(("conversations/c",), "jpfs(c): task"))
    assert sha is not None
    assert changed_paths(repo, sha) == {"conversations/c/task.md"}
    assert git(repo, "diff", "--cached") == cached_before
    assert git(repo, "diff") == unstaged_before
    status = git(repo, "status", "--porcelain").splitlines()
    assert sorted(status) == ["A  notes.txt", "MM README"]


def test_nothing_changed_returns_none(repo: Path, committer: Committer) -> None:
    rel = write(repo, "conversations/a.md", "same\n")
    assert committer.commit(Change((rel,), "first")) is not None
    write(repo, rel, "same\n")
    assert committer.commit(Change((rel,), "again")) is None
    assert committer.commit(Change(("conversations/missing.md",), "missing")) is None


def test_scope_errors(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("secret\n")
    (repo / "conversations").mkdir()
    os.symlink(outside, repo / "conversations/link")
    with Committer(repo, owned=("conversations", ".jpfs", ".gitignore")) as c:
        for bad in (
            "README",
            "../etc/passwd",
            "/abs/path",
            "conversations/../README",
            "conversations/.git/config",
            ".jpfs/local/state",
            ".jpfs/local",
            "conversations/link/secret",
            "conversationsX/a",
        ):
            with pytest.raises(ScopeError):
                c.commit(Change((bad,), "nope"))
        write(repo, ".jpfs/config.toml", "x = 1\n")
        write(repo, ".jpfs/local/cache", "never committed\n")
        sha = c.commit(Change((".jpfs",), "config"))
        assert sha is not None
        assert changed_paths(repo, sha) == {".jpfs/config.toml"}


def test_unborn_branch_first_commit_has_no_parent(tmp_path: Path) -> None:
    path = init_repo(tmp_path / "fresh")
    write(path, "conversations/a/m.md", "first\n")
    with Committer(path) as c:
        sha = c.commit(Change(("conversations/a",), "jpfs(a): task"))
    assert sha is not None
    assert git(path, "rev-list", "--parents", "-n", "1", sha).split() == [sha]
    assert git(path, "rev-parse", "refs/heads/main").strip() == sha
    assert_consistent(path)


def test_detached_head(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "--detach")
    write(repo, "conversations/d.md", "detached\n")
    with Committer(repo) as c:
        sha = c.commit(Change(("conversations/d.md",), "jpfs(d): task"))
    assert sha is not None
    assert git(repo, "rev-parse", "HEAD").strip() == sha
    assert git(repo, "rev-parse", "main").strip() == base
    assert git(repo, "symbolic-ref", "-q", "HEAD", check=False) == ""
    assert_consistent(repo)


def test_linked_worktree(repo: Path, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "fork", str(wt))
    main_tip = git(repo, "rev-parse", "main").strip()
    write(wt, "conversations/w/m.md", "in worktree\n")
    with Committer(wt) as c:
        sha = c.commit(Change(("conversations/w",), "jpfs(w): task"))
    assert sha is not None
    assert git(repo, "rev-parse", "fork").strip() == sha
    assert git(repo, "rev-parse", "main").strip() == main_tip
    assert_consistent(wt)
    assert git(repo, "status", "--porcelain") == ""


def test_index_version_4_goes_through_libgit2(repo: Path, committer: Committer) -> None:
    git(repo, "update-index", "--index-version", "4")
    write(repo, "conversations/v4/m.md", "v4\n")
    assert committer.commit(Change(("conversations/v4",), "v4")) is not None
    assert (repo / ".git/index").read_bytes()[4:8] == b"\0\0\0\4"
    assert_consistent(repo)


def test_racily_clean_user_entry_is_smudged(repo: Path, committer: Committer) -> None:
    # A file changed after `git add` within the index's timestamp second, same size:
    # once a later index write makes it look old, only smudging keeps git honest.
    for _attempt in range(3):
        path = repo / "racy.txt"
        path.write_text("aaaa\n")
        git(repo, "add", "racy.txt")
        st = path.stat()
        path.write_text("bbbb\n")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        index_second = int((repo / ".git/index").stat().st_mtime)
        if int(path.stat().st_ctime) == int(st.st_ctime) == index_second:
            break
    else:
        pytest.skip("could not stage a racy entry within one second")
    wait_until(lambda: int(time.time()) > index_second, timeout=3, message="the next second")
    write(repo, "conversations/r.md", "r\n")
    assert committer.commit(Change(("conversations/r.md",), "r")) is not None
    assert "racy.txt" in git(repo, "diff", "--name-only")


def test_stale_index_written_back_by_git_is_healed(repo: Path, committer: Committer) -> None:
    # A `git commit` that read the index before ours and then lost its ref race has
    # already written that stale index back: jpfs restores its entries by itself.
    index = repo / ".git/index"
    before = index.read_bytes()
    rel = write(repo, "conversations/h/m.md", "healed\n")
    assert committer.commit(Change((rel,), "jpfs(h): m")) is not None
    stale = repo / ".git/index.stale"
    stale.write_bytes(before)
    os.replace(stale, index)
    assert rel not in git(repo, "ls-files")
    wait_until(
        lambda: rel in git(repo, "ls-files"), timeout=5, message="the watcher to heal the index"
    )
    assert_consistent(repo)


def test_index_codec_random_edits(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexfile, "_CHUNK", 4)  # edits cross chunk boundaries
    monkeypatch.setattr(indexfile, "_KEYED", 2)  # chunks' keys are dropped between saves
    for n in range(40):
        write(repo, f"d{n % 5}/s{n % 3}/f{n}.txt", f"{n}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "seed")  # leaves a fully valid cache-tree
    index_path = repo / ".git/index"
    index = indexfile.FastIndex.parse(index_path.read_bytes(), index_path.stat())
    assert index.cache_tree is not None
    model = {
        line.split("\t")[1]: line.split()[:2] for line in git(repo, "ls-files", "-s").splitlines()
    }
    rng = random.Random(7)
    blob = git(repo, "hash-object", "-w", "README").strip()
    candidates = [*model, "d9/new.txt", "d0/s0/f0.txt/below", "d1", "zz/top", "d2/s2/x"]
    for _round in range(6):
        for _ in range(15):
            path = rng.choice(candidates + list(model))
            if rng.random() < 0.35:
                index.remove(path.encode())  # exactly that path, never files under it
                model.pop(path, None)
            else:
                mode = rng.choice(["100644", "100755"])
                index.set(path.encode(), bytes.fromhex(blob), int(mode, 8), None)
                parents = {"/".join(path.split("/")[:i]) for i in range(1, path.count("/") + 1)}
                model = {
                    p: v
                    for p, v in model.items()
                    if p != path and not p.startswith(path + "/") and p not in parents
                }
                model[path] = [mode, blob]
        index.save(index_path, repo / ".git", lambda path, raw: False, fsync=False, skip_hash=False)
        listed = {
            line.split("\t")[1]: line.split()[:2]
            for line in git(repo, "ls-files", "-s").splitlines()
        }
        assert listed == model
        scratch = repo / ".git/scratch-index"
        scratch.unlink(missing_ok=True)
        info = "".join(f"{m} {o}\t{p}\n" for p, (m, o) in sorted(model.items()))
        expected = subprocess.run(
            "git update-index --index-info && git write-tree",
            shell=True,
            cwd=repo,
            input=info,
            capture_output=True,
            text=True,
            env={**os.environ, "GIT_INDEX_FILE": str(scratch)},
            check=True,
        ).stdout.strip()
        assert git(repo, "write-tree").strip() == expected  # cache-tree was invalidated right


# ---------------------------------------------------------------------------- recovery


def test_commit_pending(repo: Path, committer: Committer) -> None:
    (repo / ".gitignore").write_text("*.lock\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore")
    tracked = write(repo, "conversations/a/old.md", "old\n")
    assert committer.commit(Change((tracked,), "old")) is not None
    assert committer.commit_pending() is None

    write(repo, "conversations/a/new.md", "written, then crashed\n")
    write(repo, "conversations/a/run.lock", "ignored\n")
    (repo / tracked).unlink()
    sha = committer.commit_pending()
    assert sha is not None
    assert changed_paths(repo, sha) == {"conversations/a/new.md", "conversations/a/old.md"}
    assert "Jpfs-Event: recover" in git(repo, "log", "-1", "--format=%B", sha)
    assert committer.commit_pending() is None
    assert git(repo, "status", "--porcelain") == ""


# ---------------------------------------------------------------------------- concurrency


def test_group_commit_threads(repo: Path, committer: Committer) -> None:
    threads, per_thread = 12, 8
    results: dict[str, str] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def worker(n: int) -> None:
        start.wait()
        try:
            for i in range(per_thread):
                rel = write(repo, f"conversations/t{n}/m{i}.md", f"t{n} m{i}\n")
                sha = committer.commit(
                    Change((rel,), f"jpfs(t{n}): m{i}", (("Jpfs-Seq", f"{n}-{i}"),))
                )
                assert sha is not None
                results[rel] = sha
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    seqs = Counter(trailer_values(repo, "Jpfs-Seq"))
    assert len(seqs) == threads * per_thread and set(seqs.values()) == {1}
    for rel, sha in results.items():
        assert rel in changed_paths(repo, sha), "caller got a commit without its change"
    subjects = git(repo, "log", "--format=%s").splitlines()
    folded = [s for s in subjects if s.startswith("jpfs: ")]
    assert len(subjects) - 1 < threads * per_thread, "nothing was folded"
    assert folded
    for sha in set(results.values()):
        body = git(repo, "log", "-1", "--format=%B", sha)
        subject = body.splitlines()[0]
        if subject.startswith("jpfs: "):
            count = int(subject.split()[1])
            listed = [line for line in body.splitlines() if line.startswith("- jpfs(")]
            assert len(listed) == count
            parsed = subprocess.run(
                ["git", "interpret-trailers", "--parse"], input=body, capture_output=True, text=True
            ).stdout.splitlines()
            assert len(parsed) == count and all(p.startswith("Jpfs-Seq: ") for p in parsed)
    assert_consistent(repo)


WORKER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from jpfs.infra.committer import Change, Committer

    repo, wid, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    with Committer(repo) as committer:
        i = 0
        while count < 0 or i < count:
            rel = f"conversations/p{wid}/m{i}.md"
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(f"{wid} {i}\\n")
            sha = committer.commit(Change((rel,), f"jpfs(p{wid}): m{i}", (("Jpfs-Seq", f"{wid}-{i}"),)))
            assert sha, rel
            print(i, flush=True)
            i += 1
    """
)


def spawn_worker(repo: Path, wid: str, count: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, str(repo), wid, str(count)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: a crash takes its git children too
    )


def test_processes_commit_concurrently(repo: Path) -> None:
    procs = [spawn_worker(repo, str(n), 20) for n in range(8)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    seqs = Counter(trailer_values(repo, "Jpfs-Seq"))
    assert len(seqs) == 8 * 20 and set(seqs.values()) == {1}
    assert_consistent(repo)


def test_user_git_commits_interleave_with_jpfs(repo: Path) -> None:
    user_commits = 8
    stop = threading.Event()
    pause = threading.Event()  # never set: a user's pause between retries
    errors: list[BaseException] = []

    def run_git_until_ok(*args: str) -> None:
        # A real user retries when git reports index.lock busy or a ref race. The pause
        # matters: a failed `git commit` has already written back the index it read
        # before locking, and jpfs needs a few ms to heal it (see the module docstring).
        deadline = time.monotonic() + 30
        while subprocess.run(["git", *args], cwd=repo, capture_output=True).returncode:
            assert time.monotonic() < deadline, f"git {args} kept failing"
            pause.wait(0.05)  # the user's pause before retrying

    def user() -> None:
        try:
            for i in range(user_commits):
                write(repo, f"user/u{i}.txt", f"user file {i}\n")
                run_git_until_ok("add", f"user/u{i}.txt")
                run_git_until_ok("commit", "-q", "-m", f"user {i}")
        except BaseException as exc:
            errors.append(exc)
        finally:
            stop.set()

    with Committer(repo) as committer:

        def agent(n: int) -> None:
            i = 0
            try:
                while not stop.is_set() or i < 5:
                    rel = write(repo, f"conversations/a{n}/m{i}.md", f"{n} {i}\n")
                    committer.commit(
                        Change((rel,), f"jpfs(a{n}): m{i}", (("Jpfs-Seq", f"{n}-{i}"),))
                    )
                    i += 1
                    stop.wait(0.005)  # pacing: agents write often, not back to back
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=user)]
        workers += [threading.Thread(target=agent, args=(n,)) for n in range(3)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    assert not errors, errors
    log = git(repo, "log", "--format=%H %s").splitlines()
    user_subjects = Counter(
        s for _, s in (line.split(" ", 1) for line in log) if s.startswith("user")
    )
    assert user_subjects == Counter(f"user {i}" for i in range(user_commits))
    for line in log:
        sha, subject = line.split(" ", 1)
        paths = changed_paths(repo, sha)
        if subject.startswith("jpfs"):
            assert all(p.startswith("conversations/") for p in paths), (subject, paths)
        elif subject.startswith("user"):
            assert all(p.startswith("user/") for p in paths), (subject, paths)
    files = set(git(repo, "ls-tree", "-r", "--name-only", "HEAD").split())
    assert {f"user/u{i}.txt" for i in range(user_commits)} <= files
    written = {str(p.relative_to(repo)) for p in (repo / "conversations").rglob("*.md")}
    assert written <= files
    seqs = Counter(trailer_values(repo, "Jpfs-Seq"))
    assert set(seqs.values()) == {1} and len(seqs) == len(written)
    assert_consistent(repo)


# ---------------------------------------------------------------------------- crashes and locks


HOLD_LOCKS = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from jpfs.infra.committer import Committer

    repo = Path(sys.argv[1])
    c = Committer(repo)
    held = [
        c._acquire(repo / ".git/index", 5, required=True),
        c._acquire(repo / ".git/refs/heads/main", 5, required=True),
    ]
    print("held", flush=True)
    sys.stdin.read()
    """
)


def test_stale_locks_of_a_killed_process_are_broken(repo: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCKS, str(repo)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    assert (repo / ".git/index.lock").exists()
    assert (repo / ".git/refs/heads/main.lock").exists()
    # While the holder lives, its locks are respected.
    with Committer(repo, index_lock_timeout=0.05, ref_lock_timeout=0.05) as c:
        write(repo, "conversations/s.md", "s\n")
        with pytest.raises(GitError, match=r"main\.lock"):
            c.commit(Change(("conversations/s.md",), "blocked"))
    holder.kill()
    holder.wait()
    started = time.monotonic()
    with Committer(repo, index_lock_timeout=30, ref_lock_timeout=30) as c:
        assert c.commit(Change(("conversations/s.md",), "after kill")) is not None
    assert time.monotonic() - started < 10
    assert not (repo / ".git/index.lock").exists()
    assert_consistent(repo)


def test_a_stale_index_lock_goes_when_a_committer_opens(repo: Path) -> None:
    # Killed right after its last commit moved the ref: no later commit may need the
    # index lock, which would then block `git` in that work tree for good.
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCKS, str(repo)],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    assert (repo / ".git/index.lock").exists()
    with Committer(repo):
        pass
    assert not (repo / ".git/index.lock").exists()
    assert git(repo, "status", "--porcelain") == ""


def test_foreign_locks_are_never_broken(repo: Path) -> None:
    write(repo, "conversations/f1.md", "f1\n")
    (repo / ".git/index.lock").write_bytes(b"")  # as a running `git commit` would hold it
    with Committer(repo, index_lock_timeout=0.1) as c:
        sha = c.commit(Change(("conversations/f1.md",), "f1"))
        assert sha is not None and git(repo, "rev-parse", "HEAD").strip() == sha
        assert (repo / ".git/index.lock").exists()
        assert "conversations/f1.md" in git(repo, "status", "--porcelain")
        (repo / ".git/index.lock").unlink()
        write(repo, "conversations/f2.md", "f2\n")
        assert c.commit(Change(("conversations/f2.md",), "f2")) is not None
    assert_consistent(repo)  # the second commit synced the first one's index entry

    (repo / ".git/refs/heads/main.lock").write_text("")
    with Committer(repo, ref_lock_timeout=0.1) as c:
        write(repo, "conversations/f3.md", "f3\n")
        with pytest.raises(GitError, match=r"refs/heads/main\.lock"):
            c.commit(Change(("conversations/f3.md",), "f3"))
    assert (repo / ".git/refs/heads/main.lock").exists()


def test_sigkill_mid_commit_leaves_repo_usable(repo: Path) -> None:
    rng = random.Random(11)
    for round_no in range(4):
        proc = spawn_worker(repo, f"k{round_no}", -1)
        assert proc.stdout is not None
        for _ in range(3 + round_no):
            assert proc.stdout.readline(), "worker died early"
        threading.Event().wait(rng.uniform(0, 0.005))  # land somewhere inside a commit
        # The whole process group, as a crash or an OOM kill of the service takes it: a
        # background `git repack` of the worker's left running would race the fsck below.
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        fsck = subprocess.run(["git", "fsck"], cwd=repo, capture_output=True, text=True)
        assert fsck.returncode == 0, fsck.stderr
        assert "error" not in fsck.stderr and "missing" not in fsck.stdout
        with Committer(repo, index_lock_timeout=2, ref_lock_timeout=2) as c:
            try:
                c.commit_pending()
            except GitError as exc:
                # Killed inside the few syscalls where a lock is not yet (or no longer)
                # registered: it is anonymous like a crashed git's, and the message says
                # which file to remove.
                lock = str(exc).split()[0]
                assert lock.endswith(".lock")
                Path(lock).unlink()
                c.commit_pending()
            index_lock = repo / ".git/index.lock"
            if index_lock.exists():  # the same window, on the index: we committed anyway
                index_lock.unlink()
                c.commit_pending()  # and now the index catches up
            assert not index_lock.exists()
            # Its own pack roll-up, left running, would race the next fsck (as a user's
            # fsck races any git gc): this test is about the killed worker.
            c.close(wait=True)
    assert_consistent(repo)


def test_big_commits_go_into_packfiles(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(committer_core, "_REPACK_EVERY", 3)
    packs = repo / ".git/objects/pack"
    with Committer(repo) as c:
        for round_no in range(3):
            for n in range(20):
                write(repo, f"conversations/big/r{round_no}/m{n}.md", f"{round_no} {n}\n")
            sha = c.commit(Change((f"conversations/big/r{round_no}",), f"batch {round_no}"))
            assert sha is not None
            assert git(repo, "show", f"{sha}:conversations/big/r{round_no}/m7.md") == (
                f"{round_no} 7\n"
            )
            if round_no < 2:  # the third pack starts a repack that replaces them
                for idx in packs.glob("*.idx"):
                    git(repo, "verify-pack", str(idx))
                assert len(list(packs.glob("*.pack"))) == round_no + 1
                assert_consistent(repo)
        # Every third pack starts a geometric repack in the background.
        wait_until(
            lambda: len(list(packs.glob("*.pack"))) < 3, timeout=20, message="the geometric repack"
        )
        c.close(wait=True)
    assert_consistent(repo)


def test_maintenance_writes_commit_graph(repo: Path) -> None:
    with Committer(repo, maintenance_every=2) as c:
        for i in range(2):
            c.commit(Change((write(repo, f"conversations/g{i}.md", "g\n"),), "g"))
        info = repo / ".git/objects/info"
        wait_until(
            lambda: (info / "commit-graph").exists() or (info / "commit-graphs").exists(),
            timeout=20,
            message="commit-graph",
        )
        c.close(wait=True)


def test_closed_committer_refuses(repo: Path) -> None:
    c = Committer(repo)
    c.close()
    with pytest.raises(GitError):
        c.commit(Change(("conversations/x",), "x"))


def test_not_a_repository(tmp_path: Path) -> None:
    with pytest.raises(GitError):
        Committer(tmp_path)
