"""The listing caches (`.jpfs/local/summaries.bin`, `tree-summaries.bin`): never stale,
never the source of truth."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from jpfs.core.conversation import Conversation
from jpfs.core.summaries import Summaries
from jpfs.core.tree import listing
from jpfs.infra.fsclock import SETTLED_NS
from tests.conftest import Result, wait_until

CONV = "conversations"


def ls(cli: Callable[..., Result]) -> dict[str, dict[str, object]]:
    shown = cli("c", "ls", "--format", "json")
    assert shown.code == 0, shown.stderr
    return {row["id"]: row for row in json.loads(shown.stdout)}


def tree(cli: Callable[..., Result]) -> dict[str, dict[str, object]]:
    shown = cli("tree", "--format", "json")
    assert shown.code == 0, shown.stderr
    return {row["id"]: row for row in json.loads(shown.stdout)}


def test_listings_follow_every_change_with_the_cache_warm(
    ws: Path, cli: Callable[..., Result]
) -> None:
    for cid in ("a", "b", "b/c"):
        assert cli("c", "new", cid, "--no-activate").code == 0
    before, view = ls(cli), tree(cli)
    assert set(before) == set(view) == {"a", "b", "b/c"}
    assert (ws / ".jpfs" / "local" / "summaries.bin").is_file()
    assert (ws / ".jpfs" / "local" / "tree-summaries.bin").is_file()

    conv = Conversation(ws / CONV, "a")
    (conv.path / "task.md").write_text("Do it.\n", encoding="utf-8")
    conv.append_event("user", "Do it.\n")
    conv.append_event("assistant", "Done: all of it.\n", {"model": "m"})
    (ws / CONV / "b" / "c" / "task.md").write_text("Hide me.\n", encoding="utf-8")
    text = (ws / CONV / "b" / "conversation.toml").read_text(encoding="utf-8")
    (ws / CONV / "b" / "conversation.toml").write_text(
        text.replace('title = ""', 'title = "renamed"'), encoding="utf-8"
    )
    assert cli("c", "rm", "b/c").code == 0

    after, view = ls(cli), tree(cli)
    assert set(after) == set(view) == {"a", "b"}
    assert after["a"]["events_count"] == 2 and after["a"]["status"] != before["a"]["status"]
    assert view["a"]["last"] == "Done: all of it."
    assert after["b"]["title"] == "renamed" == view["b"]["title"]


def test_a_broken_cache_is_rebuilt_from_the_files(ws: Path, cli: Callable[..., Result]) -> None:
    assert cli("c", "new", "a", "--no-activate").code == 0
    expected_ls, expected_tree = ls(cli), tree(cli)
    for name in ("summaries.bin", "tree-summaries.bin"):
        (ws / ".jpfs" / "local" / name).write_bytes(b"\x00garbage\xff")
    assert ls(cli) == expected_ls
    got = tree(cli)
    assert {k: {**v, "elapsed": 0} for k, v in got.items()} == {
        k: {**v, "elapsed": 0} for k, v in expected_tree.items()
    }


def _trusted(ws: Path, conv_id: str) -> bool:
    """Whether the ls cache vouches for ``conv_id``'s directory listing and summary."""
    node = Summaries(ws / ".jpfs" / "local").nodes.get(conv_id)
    return node is not None and node[0] is not None and node[5] is not None


def _settle(ws: Path, cli: Callable[..., Result], *conv_ids: str) -> None:
    """List until the cache trusts these conversations: their files are older than the
    clock's granularity (fsclock.SETTLED_NS) by then."""
    wait_until(
        lambda: ls(cli) and all(_trusted(ws, c) for c in conv_ids),
        timeout=10,
        message="the listing cache to trust the conversations",
    )


def test_a_listing_trusts_nothing_changed_within_a_clock_tick(
    ws: Path, cli: Callable[..., Result]
) -> None:
    """A second change in the same tick of the file clock leaves a directory's stamps as
    they were: what was listed or read right after a change is looked at again."""
    assert cli("c", "new", "a", "--no-activate").code == 0
    listing(ws / CONV, cache_dir=ws / ".jpfs" / "local")
    # The file system's time is read off a probe each walk (whatever its granularity).
    assert (ws / ".jpfs" / "local" / "summaries.clock").is_file()
    horizon = time.time_ns() - SETTLED_NS
    st = os.stat(ws / CONV / "a")
    if max(st.st_mtime_ns, st.st_ctime_ns) >= horizon:  # the usual case: just created
        assert not _trusted(ws, "a")
    _settle(ws, cli, "a")


def test_unchanged_directories_are_not_listed_again_but_every_change_is_seen(
    ws: Path, cli: Callable[..., Result]
) -> None:
    for cid in ("a", "b"):
        assert cli("c", "new", cid, "--no-activate", "--title", "same size").code == 0
    _settle(ws, cli, "a", "b")

    # A sub-conversation made by hand: a new directory in a directory the cache lists
    # from memory (its stamp moved).
    child = ws / CONV / "a" / "kid"
    child.mkdir()
    (child / "task.md").write_text("Hello.\n", encoding="utf-8")
    # conversation.toml edited in place, same size: only its own stamps move.
    toml = ws / CONV / "b" / "conversation.toml"
    with toml.open("r+", encoding="utf-8") as f:
        text = f.read()
        f.seek(0)
        f.write(text.replace('title = "same size"', 'title = "SAME SIZE"'))
    shown = ls(cli)
    assert "a/kid" in shown
    assert shown["b"]["title"] == "SAME SIZE"
    assert tree(cli)["b"]["title"] == "SAME SIZE"

    # Removed by hand: gone from both listings, and from the cache.
    shutil.rmtree(child)
    assert "a/kid" not in ls(cli) and "a/kid" not in tree(cli)
    assert "a/kid" not in Summaries(ws / ".jpfs" / "local").nodes


def test_a_scoped_listing_keeps_the_rest_of_the_cache(ws: Path, cli: Callable[..., Result]) -> None:
    for cid in ("a", "a/b", "c"):
        assert cli("c", "new", cid, "--no-activate").code == 0
    _settle(ws, cli, "a", "a/b", "c")
    scoped = cli("c", "ls", "--root", "a", "--format", "json")
    assert [row["id"] for row in json.loads(scoped.stdout)] == ["a/b"]
    assert all(_trusted(ws, c) for c in ("a", "a/b", "c"))
