"""The listing caches (`.jpfs/local/summaries.bin`, `tree-summaries.bin`): never stale,
never the source of truth."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from jpfs.core.conversation import Conversation
from tests.conftest import Result

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
