from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jpfs.errors import JpfsError, NotFoundError, ScopeError, ToolError
from jpfs.infra import safefs, safescan

BAD_PATHS = [
    "../x",
    "/etc/passwd",
    "a/../../x",
    "a/..",
    "x\0y",
    "",
    ".git/config",
    ".GIT/config",
    "sub/.Git/HEAD",
    ".git",
    ".g\u200cit/config",
    ".git./config",
    ".jpfs/local/x",
    ".JPFS/Local/x",
    ".jpfs/local",
]


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """(root, outside): a small tree and a directory next to it holding a secret."""
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("import os\nprint('hello')\n")
    (root / "README.md").write_text("# readme\nhello world\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("hello from git\n")
    (root / ".jpfs" / "local").mkdir(parents=True)
    (root / ".jpfs" / "local" / "pid").write_text("hello local\n")
    (root / ".jpfs" / "config.toml").write_text("x = 1\n")
    outside.mkdir()
    (outside / "secret.txt").write_text("hello secret\n")
    (root / "linkdir").symlink_to(outside)
    (root / "linkfile").symlink_to(outside / "secret.txt")
    return root, outside


@pytest.mark.parametrize("bad", BAD_PATHS)
def test_bad_paths_refused_everywhere(tree: tuple[Path, Path], bad: str) -> None:
    root, _ = tree
    with pytest.raises(ScopeError):
        safefs.split_relpath(bad)
    with pytest.raises(ScopeError):
        safefs.open_beneath(root, bad, os.O_RDONLY)
    with pytest.raises(ScopeError):
        safefs.read_text(root, bad)
    with pytest.raises(ScopeError):
        safefs.write_text(root, bad, "pwned")
    with pytest.raises(ScopeError):
        safefs.resolve_within(root, bad)


def test_scope_error_is_one_line_and_names_path() -> None:
    with pytest.raises(ScopeError) as info:
        safefs.split_relpath("a/../../etc\n/passwd")
    msg = str(info.value)
    assert "\n" not in msg and "etc" in msg


def test_normalize_relpath() -> None:
    assert safefs.normalize_relpath("./src//a.py") == "src/a.py"
    assert safefs.normalize_relpath("./") == "."
    assert safefs.normalize_relpath(".jpfs/config.toml") == ".jpfs/config.toml"


def test_symlinks_refused_for_every_operation(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    for path in ("linkdir/secret.txt", "linkfile"):
        with pytest.raises(ScopeError):
            safefs.read_text(root, path)
    with pytest.raises(ScopeError):
        safescan.list_dir(root, "linkdir")
    with pytest.raises(ScopeError):
        safescan.grep(root, "hello", "linkdir")
    with pytest.raises(ScopeError):
        safefs.write_text(root, "linkdir/new.txt", "pwned")
    with pytest.raises(ScopeError):
        safefs.modify_text(root, "linkdir/secret.txt", "hello", "pwned")
    with pytest.raises(ScopeError):
        safefs.resolve_within(root, "linkdir/secret.txt")
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_write_over_symlink_never_writes_through(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    with pytest.raises(ScopeError):
        safefs.write_text(root, "linkfile", "pwned")
    with pytest.raises(ScopeError):
        safefs.modify_text(root, "linkfile", "hello", "pwned")
    assert (outside / "secret.txt").read_text() == "hello secret\n"
    assert (root / "linkfile").is_symlink()


def test_dangling_symlink_is_not_created_through(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    (root / "dangling").symlink_to(outside / "created.txt")
    with pytest.raises(ScopeError):
        safefs.write_text(root, "dangling", "pwned")
    with pytest.raises(ScopeError):
        safefs.open_beneath(root, "dangling", os.O_WRONLY | os.O_CREAT)
    assert not (outside / "created.txt").exists()


def test_read_text_and_truncation(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    assert safefs.read_text(root, "src/a.py") == ("import os\nprint('hello')\n", False)
    assert safefs.read_text(root, "./src//a.py", max_bytes=6) == ("import", True)
    (root / "u.txt").write_text("ab\u00e9", encoding="utf-8")  # é is 2 bytes
    assert safefs.read_text(root, "u.txt", max_bytes=3) == ("ab", True)


def test_read_errors(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    (root / "bin.dat").write_bytes(b"\x89PNG\0\0\x01")
    (root / "latin.txt").write_bytes(b"caf\xe9 au lait")
    with pytest.raises(ToolError, match="binary"):
        safefs.read_text(root, "bin.dat")
    with pytest.raises(ToolError, match="not UTF-8"):
        safefs.read_text(root, "latin.txt")
    with pytest.raises(NotFoundError):
        safefs.read_text(root, "nope.txt")
    with pytest.raises(ToolError, match="directory"):
        safefs.read_text(root, "src")
    with pytest.raises(ToolError, match="not a directory"):
        safefs.read_text(root, "README.md/x")


def test_fifo_is_refused_without_hanging(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    os.mkfifo(root / "pipe")
    with pytest.raises(ToolError, match="not a regular file"):
        safefs.read_text(root, "pipe")


def test_list_dir_hides_git_and_local(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    top = safescan.list_dir(root)
    paths = {e.path: e.kind for e in top.entries}
    assert paths == {
        ".jpfs": "dir",
        "README.md": "file",
        "linkdir": "symlink",
        "linkfile": "symlink",
        "src": "dir",
    }
    everything = safescan.list_dir(root, recursive=True)
    names = [e.path for e in everything.entries]
    assert "src/a.py" in names and ".jpfs/config.toml" in names
    assert not any("git" in n.lower() or "local" in n for n in names)
    assert not any(n.startswith("linkdir/") for n in names)
    assert next(e for e in everything.entries if e.path == "src/a.py").size == 25


def test_list_dir_truncates(tmp_path: Path) -> None:
    for i in range(30):
        (tmp_path / f"f{i:02}").write_text("")
    listing = safescan.list_dir(tmp_path, max_entries=10)
    assert len(listing.entries) == 10 and listing.total == 30 and listing.complete
    assert listing.entries[0].path == "f00"


def test_grep(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    res = safescan.grep(root, "hello")
    assert [(m.path, m.line_no) for m in res.matches] == [("README.md", 2), ("src/a.py", 2)]
    assert res.total == 2
    assert safescan.grep(root, "HELLO").total == 0
    assert safescan.grep(root, "HELLO", ignore_case=True).total == 2
    assert safescan.grep(root, "print(", relpath="src").total == 1  # literal, not a regex
    assert safescan.grep(root, r"^import \w+$", regex=True).total == 1
    assert safescan.grep(root, "hello", relpath="README.md").matches[0].path == "README.md"
    with pytest.raises(ToolError, match="invalid regular expression"):
        safescan.grep(root, "(", regex=True)
    with pytest.raises(ScopeError):
        safescan.grep(root, "hello", relpath=".git")


def test_grep_truncation_and_binary(tmp_path: Path) -> None:
    (tmp_path / "many.txt").write_text("x\n" * 500)
    (tmp_path / "bin").write_bytes(b"x\0x")
    res = safescan.grep(tmp_path, "x", max_matches=7)
    assert len(res.matches) == 7 and res.total == 500 and res.skipped == 1


def test_grep_cancel(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(ToolError, match="cancelled"):
        safescan.grep(root, "hello", cancel=cancel)


def test_write_modify_read_round_trip(tmp_path: Path) -> None:
    assert safefs.write_text(tmp_path, "new/dir/f.txt", "one two two\n") is True
    assert safefs.write_text(tmp_path, "new/dir/f.txt", "one two three\n") is False
    assert safefs.modify_text(tmp_path, "new/dir/f.txt", "two", "2") == 1
    assert safefs.read_text(tmp_path, "new/dir/f.txt") == ("one 2 three\n", False)
    assert [p.name for p in (tmp_path / "new" / "dir").iterdir()] == ["f.txt"]  # no temp left


def test_write_preserves_mode_and_refuses_dirs(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    safefs.write_text(tmp_path, "run.sh", "#!/bin/sh\necho hi\n")
    assert script.stat().st_mode & 0o777 == 0o755
    (tmp_path / "d").mkdir()
    with pytest.raises(ToolError, match="directory"):
        safefs.write_text(tmp_path, "d", "x")
    with pytest.raises(NotFoundError):
        safefs.write_text(tmp_path, "missing/f.txt", "x", create_dirs=False)
    assert not (tmp_path / "missing").exists()


def test_modify_errors(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("a b a\n")
    with pytest.raises(ToolError, match="not found"):
        safefs.modify_text(tmp_path, "f.txt", "zzz", "y")
    with pytest.raises(ToolError, match="occurs 2 times"):
        safefs.modify_text(tmp_path, "f.txt", "a", "y")
    with pytest.raises(ToolError, match="empty"):
        safefs.modify_text(tmp_path, "f.txt", "", "y")
    assert (tmp_path / "f.txt").read_text() == "a b a\n"
    assert safefs.modify_text(tmp_path, "f.txt", "a", "y", count=None) == 2
    assert (tmp_path / "f.txt").read_text() == "y b y\n"


def test_resolve_within(tmp_path: Path) -> None:
    assert safefs.resolve_within(tmp_path, "./a//b") == tmp_path / "a" / "b"


# How long a race test may try before it gives up on meeting both outcomes.
RACE_DEADLINE = 30.0

# Swappers run in their own process: a thread would share the GIL with the opener and
# could be starved for the whole loop, so the race might never actually happen.
SWAP_DIR = """
import os, sys
root = sys.argv[1]
d, held, link = (os.path.join(root, n) for n in ("d", "held", "link"))
print("ready", flush=True)
while True:  # each rename is atomic: "d" flips between the real directory and the link
    os.rename(d, held); os.rename(link, d); os.rename(d, link); os.rename(held, d)
"""
SWAP_FILE = """
import os, sys
root, secret = sys.argv[1], sys.argv[2]
spare, target = os.path.join(root, "spare"), os.path.join(root, "target")
print("ready", flush=True)
while True:  # keep renaming a fresh link to the outside file over the target
    try:
        os.symlink(secret, spare)
    except FileExistsError:
        pass
    os.rename(spare, target)
"""


@contextlib.contextmanager
def swapper(script: str, *argv: Path) -> Iterator[None]:
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *map(str, argv)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        yield
    finally:
        proc.kill()
        proc.wait()


def test_race_swapping_dir_for_symlink_never_escapes(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    (root / "d" / "f.txt").write_text("inside")
    outside.mkdir()
    (outside / "f.txt").write_text("outside")
    outside_id = (outside / "f.txt").stat().st_ino
    (root / "link").symlink_to(outside)
    escaped = inside = refused = tries = 0
    deadline = time.monotonic() + RACE_DEADLINE
    with swapper(SWAP_DIR, root):
        # At least 3000 tries, and on until both outcomes were seen: on a busy machine
        # the swapper can be off the CPU for a whole batch of tries (all refused, or all
        # inside), and then the race was not exercised at all.
        while (tries < 3000 or not (inside and refused)) and time.monotonic() < deadline:
            tries += 1
            try:
                fd = safefs.open_beneath(root, "d/f.txt", os.O_RDONLY)
            except JpfsError:
                refused += 1
                continue
            try:
                if os.fstat(fd).st_ino == outside_id:
                    escaped += 1
                else:
                    inside += 1
            finally:
                os.close(fd)
    assert escaped == 0
    assert inside > 0 and refused > 0, (inside, refused)  # the race really was exercised


def test_race_link_swapped_in_at_final_component_never_written_through(
    tmp_path: Path,
) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("untouched")
    written = refused = i = 0
    deadline = time.monotonic() + RACE_DEADLINE
    with swapper(SWAP_FILE, root, secret):
        # As above: at least 1000 tries, and on until the swapper was met at least once.
        while (i < 1000 or not refused) and time.monotonic() < deadline:
            i += 1
            try:
                safefs.write_text(root, "target", f"write {i}")
                written += 1
            except ScopeError:
                refused += 1
    assert secret.read_text() == "untouched"
    assert refused > 0, (written, refused)


def test_link_planted_between_check_and_rename_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Deterministic version of the race above: the link appears right after the check.
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("untouched")
    real_stat = os.stat

    def stat_then_plant(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        try:
            return real_stat(path, *args, **kwargs)
        finally:
            if path == "target":
                os.symlink(secret, root / "spare")
                os.rename(root / "spare", root / "target")

    (root / "target").write_text("old")
    monkeypatch.setattr(os, "stat", stat_then_plant)
    try:
        assert safefs.write_text(root, "target", "new") is False
    finally:
        monkeypatch.undo()
    assert secret.read_text() == "untouched"
    assert not (root / "target").is_symlink()
    assert (root / "target").read_text() == "new"
