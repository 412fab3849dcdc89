"""Split indexes (jpfs.infra.committer.splitindex): what jpfs writes, git reads, and the
other way round, checked with the git CLI on real repositories."""

from __future__ import annotations

import os
import random
import subprocess
import time
from pathlib import Path

import pytest

import jpfs.infra.committer.indexentries as indexentries
import jpfs.infra.committer.indexfile as indexfile
import jpfs.infra.committer.splitindex as splitindex
from jpfs.infra.committer import Change, Committer
from jpfs.infra.committer.splitindex import SplitPolicy
from jpfs.infra.committer.splitlink import SplitCorrupt, ewah_decode, ewah_encode
from tests.infra.committer.test_committer import (  # noqa: F401  (the autouse fixture)
    _isolated_git,
    assert_consistent,
    git,
    init_repo,
    write,
)

ALWAYS = SplitPolicy(enabled=True, max_percent=20, clean=True)


def listing(repo: Path) -> dict[str, list[str]]:
    """path -> [mode, oid, stage] as git sees the index."""
    out = git(repo, "ls-files", "-s")
    return {line.split("\t")[1]: line.split("\t")[0].split() for line in out.splitlines()}


def ours(index: indexfile.FastIndex) -> dict[str, list[str]]:
    found = {}
    for chunk in index.chunks:
        for raw in chunk.raws:
            key = indexentries.key_of(raw)
            mode = int.from_bytes(raw[24:28], "big")
            found[key[:-2].decode()] = [f"{mode:06o}", raw[40:60].hex(), str(key[-1])]
    return found


def load(repo: Path) -> indexfile.FastIndex:
    path = repo / ".git/index"
    return indexfile.FastIndex.parse(path.read_bytes(), path.stat(), repo / ".git")


def shared_files(repo: Path) -> list[Path]:
    return sorted((repo / ".git").glob("sharedindex.*"))


def seeded(tmp_path: Path, files: int) -> Path:
    repo = init_repo(tmp_path / "repo")
    for n in range(files):
        write(repo, f"d{n % 7}/f{n:04d}.txt", f"{n}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "seed")
    return repo


def test_ewah_round_trip_and_runs() -> None:
    rng = random.Random(3)
    for nbits in (0, 1, 63, 64, 65, 1000, 5000):
        bitmap = bytearray(((nbits + 63) // 64) * 8)
        chosen = sorted(rng.sample(range(nbits), min(nbits, 40))) if nbits else []
        for at in chosen:
            bitmap[at // 8] |= 1 << (at % 8)
        data = b"junk" + ewah_encode(bitmap, nbits) + b"tail"
        positions, end = ewah_decode(data, 4)
        assert positions == chosen
        assert data[end:] == b"tail"
    # A run-length word (git writes these for long runs): 2 words of ones, then a literal.
    words = [(1 << 33) | (2 << 1) | 1, 0b101]
    raw = (130).to_bytes(4, "big") + len(words).to_bytes(4, "big")
    raw += b"".join(w.to_bytes(8, "big") for w in words) + (0).to_bytes(4, "big")
    assert ewah_decode(raw, 0)[0] == [*range(128), 128, 130]
    with pytest.raises(SplitCorrupt):
        ewah_decode(raw[:-6], 0)


def test_git_reads_the_split_index_jpfs_writes(tmp_path: Path) -> None:
    repo = seeded(tmp_path, 300)
    git(repo, "config", "core.splitIndex", "true")
    with Committer(repo) as committer:
        for n in range(3):
            write(repo, f"d1/f{n:04d}.txt", f"changed {n}\n")  # replaces base entries
            write(repo, f"new/{n}.txt", f"new {n}\n")  # new entries
            (repo / f"d2/f{n + 100:04d}.txt").unlink(missing_ok=True)
            paths = [f"d1/f{n:04d}.txt", f"new/{n}.txt", f"d2/f{n + 100:04d}.txt"]
            assert committer.commit(Change(tuple(paths), f"jpfs: step {n}")) is not None
            index = load(repo)
            assert index.split is not None  # only the changes are in the file
            base = shared_files(repo)[0].stat().st_size
            assert (repo / ".git/index").stat().st_size < base / 10
            assert ours(index) == listing(repo)
            assert_consistent(repo)  # git status, write-tree: git rewrites it its way
    git(repo, "update-index", "--no-split-index")  # git takes it back whole
    assert_consistent(repo)


def test_jpfs_reads_and_extends_the_split_index_git_writes(tmp_path: Path) -> None:
    repo = seeded(tmp_path, 400)
    git(repo, "update-index", "--split-index")
    # Replacements far apart (run-length words in git's bitmaps), deletions, new files.
    for n in (0, 5, 397):
        write(repo, f"d{n % 7}/f{n:04d}.txt", f"edited {n}\n")
    git(repo, "add", "-A")
    git(repo, "rm", "-q", "d3/f0003.txt", "d6/f0300.txt")
    write(repo, "added.txt", "added\n")
    git(repo, "add", "added.txt")
    index = load(repo)
    assert index.split is not None
    assert ours(index) == listing(repo)
    git(repo, "commit", "-q", "-m", "user")
    git(repo, "config", "core.splitIndex", "true")
    with Committer(repo) as committer:
        write(repo, "d0/f0007.txt", "by jpfs\n")
        assert committer.commit(Change(("d0/f0007.txt",), "jpfs: edit")) is not None
    assert_consistent(repo)
    assert ours(load(repo)) == listing(repo)


@pytest.mark.parametrize("percent", [0, 20])
def test_random_edits_through_a_split_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, percent: int
) -> None:
    """Random sets and removals, saved split (a new base at every save with 0%), match
    git's view after each save, and jpfs re-reads the same entries."""
    monkeypatch.setattr(indexfile, "_CHUNK", 4)
    monkeypatch.setattr(splitindex, "_CHUNK", 3)
    monkeypatch.setattr(indexfile, "_KEYED", 2)
    monkeypatch.setattr(splitindex, "_SPARSE", 5)
    repo = seeded(tmp_path, 60)
    index = load(repo)
    model = {p: v[:2] for p, v in listing(repo).items()}
    blob = git(repo, "hash-object", "-w", "d0/f0000.txt").strip()
    rng = random.Random(percent)
    policy = SplitPolicy(enabled=True, max_percent=percent, clean=True)
    for _round in range(8):
        for _ in range(12):
            path = rng.choice([*model, "zz/new.txt", "d1/extra.txt", "a.txt"])
            if rng.random() < 0.35:
                index.remove(path.encode())
                model.pop(path, None)
            else:
                mode = rng.choice(["100644", "100755"])
                index.set(path.encode(), bytes.fromhex(blob), int(mode, 8), None)
                model[path] = [mode, blob]
        index.save(repo / ".git/index", repo / ".git", lambda p, r: False, fsync=False,
                   skip_hash=False, split=policy)  # fmt: skip
        assert {p: v[:2] for p, v in listing(repo).items()} == model
        assert ours(load(repo)) == ours(index)
    assert index.split is not None
    if percent == 0:
        assert len(shared_files(repo)) > 1  # a base per save; none an hour old yet


def test_a_base_read_before_is_not_read_again(tmp_path: Path) -> None:
    # git status rewrites the split part and keeps the base: reading that index again
    # takes the base already in memory (the same entries), not a second copy of it.
    repo = seeded(tmp_path, 300)
    git(repo, "config", "core.splitIndex", "true")
    with Committer(repo) as committer:
        write(repo, "d1/f0001.txt", "changed\n")
        write(repo, "new/a.txt", "new\n")
        assert committer.commit(Change(("d1/f0001.txt", "new/a.txt"), "jpfs: edit")) is not None
    first = load(repo)
    assert first.split is not None
    write(repo, "d2/f0002.txt", "by the user\n")
    git(repo, "add", "d2/f0002.txt")  # git writes the split part, on the same base
    path = repo / ".git/index"
    again = indexfile.FastIndex.parse(path.read_bytes(), path.stat(), repo / ".git", first.split)
    assert again.split is not None and again.split.sha == first.split.sha
    assert again.split.raws is first.split.raws
    assert ours(again) == ours(load(repo)) == listing(repo)
    # A base of another name is read from its file.
    other = splitindex.SplitState(b"\0" * 20, first.version, [])
    assert ours(
        indexfile.FastIndex.parse(path.read_bytes(), path.stat(), repo / ".git", other)
    ) == listing(repo)


def test_superseded_bases_expire_unless_git_is_told_to_keep_them(tmp_path: Path) -> None:
    repo = seeded(tmp_path, 50)
    index = load(repo)
    blob = bytes.fromhex(git(repo, "hash-object", "-w", "d0/f0000.txt").strip())

    def save(policy: SplitPolicy, name: str) -> None:
        index.set(name.encode(), blob, 0o100644, None)
        index.save(repo / ".git/index", repo / ".git", lambda p, r: False, fsync=False,
                   skip_hash=False, split=policy)  # fmt: skip

    keep = SplitPolicy(enabled=True, max_percent=0, clean=False)
    save(keep, "one.txt")
    save(keep, "two.txt")
    old = shared_files(repo)
    assert len(old) == 2
    hours_ago = time.time() - 2 * 3600
    for path in old:
        os.utime(path, (hours_ago, hours_ago))
    save(keep, "three.txt")
    assert set(old) < set(shared_files(repo))  # sharedIndexExpire set: git's to clean
    save(SplitPolicy(enabled=True, max_percent=0, clean=True), "four.txt")
    left = shared_files(repo)
    assert not set(old) & set(left)  # an hour unused: deleted
    assert len(left) == 2  # the base in use and the one just superseded
    assert_consistent(repo, clean=False)
    assert ours(load(repo)) == ours(index)


def test_config_decides_when_to_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(splitindex, "SPLIT_MIN_ENTRIES", 100)
    repo = seeded(tmp_path, 60)

    def commit(name: str) -> None:
        with Committer(repo) as committer:
            write(repo, name, f"{name}\n")
            assert committer.commit(Change((name,), f"jpfs: {name}")) is not None
        assert_consistent(repo)

    commit("small.txt")  # unset and small: written whole
    assert load(repo).split is None and not shared_files(repo)
    for n in range(50):
        write(repo, f"more/{n}.txt", f"{n}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "more")
    commit("large.txt")  # unset and 100 entries or more: split
    assert load(repo).split is not None
    git(repo, "config", "core.splitIndex", "false")
    commit("whole.txt")  # false: written whole again
    assert load(repo).split is None


def test_a_split_index_whose_base_is_gone_is_left_alone(tmp_path: Path) -> None:
    repo = seeded(tmp_path, 30)
    git(repo, "update-index", "--split-index")
    for path in shared_files(repo):
        path.unlink()
    with pytest.raises(indexfile.IndexUnsupported):
        load(repo)
    with Committer(repo) as committer:
        write(repo, "x.txt", "x\n")
        sha = committer.commit(Change(("x.txt",), "jpfs: x"))
    assert sha is not None
    assert git(repo, "rev-parse", "HEAD").strip() == sha
    broken = subprocess.run(["git", "status"], cwd=repo, capture_output=True, text=True)
    assert broken.returncode != 0  # git's own verdict on that index, untouched by jpfs


def test_a_shared_index_out_of_order_is_refused(tmp_path: Path) -> None:
    # Git dies on such an index ("unordered stage entries"); the base's position lookups
    # bisect, so an unordered base must not be taken either.
    repo = seeded(tmp_path, 12)
    data = (repo / ".git/index").read_bytes()
    version, raws, _ = indexentries.parse_entries(data)
    gitdir = repo / ".git"
    empty = ewah_encode(bytearray(8), len(raws))

    def link(parts: list[bytes]) -> bytes:
        sha = splitindex.write_shared(gitdir, tmp_path, version, len(parts), parts, False)
        return sha + empty + empty

    state, merged = splitindex.merge_base(version, link(raws), gitdir, [])
    assert merged == raws
    assert state.changes() == 0
    swapped = [raws[1], raws[0], *raws[2:]]
    with pytest.raises(SplitCorrupt, match="out of order"):
        splitindex.merge_base(version, link(swapped), gitdir, [])


def test_a_busy_record_makes_a_new_base_every_few_thousand_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With splitIndex.maxPercentChange unset, the split part is capped in entries too
    (20% of 10,000 conversations' index is 29k entries, written at every commit); set, git's
    percentage alone decides."""
    monkeypatch.setattr(splitindex, "MAX_CHANGES", 5)
    repo = seeded(tmp_path, 300)
    git(repo, "config", "core.splitIndex", "true")

    def commit(*names: str) -> bytes:
        with Committer(repo) as committer:
            for name in names:
                write(repo, name, f"{name}\n")
            assert committer.commit(Change(names, f"jpfs: {names[0]}")) is not None
        assert_consistent(repo)
        split = load(repo).split
        assert split is not None
        return split.sha

    first = commit("a0.txt")  # the first base holds a0.txt
    assert commit("a1.txt", "a2.txt", "a3.txt") == first  # 3 changes: 1% and under 5
    second = commit("a4.txt", "a5.txt", "a6.txt")  # 6 changes: past 5, 2% of the index
    assert second != first
    assert commit("b0.txt") == second
    git(repo, "config", "splitIndex.maxPercentChange", "20")
    assert commit(*(f"c{n}.txt" for n in range(8))) == second  # 9 changes, 3% of it
    assert listing(repo) == ours(load(repo))
