"""``textfile.create_new``: a file appears whole or not at all, never over another one.

Event appends and mail go through it, so two writers racing for one name must leave
exactly one winner, and a missing directory must not be made unless asked.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from jpfs.infra import textfile


@pytest.fixture(params=["unnamed", "named temporary"])
def tmp_dir(request: pytest.FixtureRequest, tmp_path: Path) -> Path | None:
    """None: the O_TMPFILE path (Linux); a directory: the temporary-file-and-link path."""
    if request.param == "unnamed":
        return None
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    return scratch


def test_creates_the_file_whole_and_leaves_nothing_else(
    tmp_path: Path, tmp_dir: Path | None
) -> None:
    target = tmp_path / "events" / "0001-user.md"
    target.parent.mkdir()
    assert textfile.create_new(target, "héllo\n", tmp_dir=tmp_dir, parents=False)
    assert target.read_bytes() == "héllo\n".encode()
    assert sorted(os.listdir(target.parent)) == ["0001-user.md"]
    if tmp_dir is not None:
        assert os.listdir(tmp_dir) == []
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


def test_an_existing_name_is_left_alone(tmp_path: Path, tmp_dir: Path | None) -> None:
    target = tmp_path / "0001-user.md"
    target.write_text("first\n")
    assert not textfile.create_new(target, "second\n", tmp_dir=tmp_dir)
    assert target.read_text() == "first\n"
    assert os.listdir(tmp_path) == (["0001-user.md", "scratch"] if tmp_dir else ["0001-user.md"])


def test_a_missing_directory_is_made_only_when_asked(tmp_path: Path) -> None:
    target = tmp_path / "gone" / "0001-user.md"
    with pytest.raises(FileNotFoundError):
        textfile.create_new(target, "x\n", parents=False)
    assert not (tmp_path / "gone").exists()
    assert textfile.create_new(target, "x\n")
    assert target.read_text() == "x\n"


def test_a_relative_path_is_taken_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "events").mkdir()
    monkeypatch.chdir(tmp_path)
    assert textfile.create_new(Path("events/0001-user.md"), "x\n", parents=False)
    assert (tmp_path / "events" / "0001-user.md").read_text() == "x\n"


def test_racing_writers_leave_exactly_one_winner(tmp_path: Path, tmp_dir: Path | None) -> None:
    target = tmp_path / "0001-user.md"
    start = threading.Barrier(8)
    won: list[str] = []

    def race(text: str) -> None:
        start.wait()
        if textfile.create_new(target, text, tmp_dir=tmp_dir):
            won.append(text)

    threads = [threading.Thread(target=race, args=(f"writer {n}\n",)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    assert target.read_text() == won[0]
