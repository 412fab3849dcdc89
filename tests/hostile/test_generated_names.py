"""Generated hostile names and nesting: one conversation's bad directory name or file is
that conversation's problem alone. Listings, the CLI and commits carry on for the rest.

Each example puts one generated thing beside a good conversation in a real workspace,
then lists (the library and ``jpfs c ls`` / ``jpfs tree``) and commits a new edit of the
good conversation, as the daemon's recovery does (``edits.pending``, names that are not
UTF-8 left out, then one commit) and as its fallback does (``commit_pending``).
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from jpfs.core import tree
from jpfs.core.workspace import open_workspace
from jpfs.infra.committer import Change
from jpfs.services.daemon import edits
from tests.conftest import Result, rgit

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Any one path segment: bytes (not UTF-8 included), no "/" or NUL, not "." or "..".
NAMES = st.binary(min_size=1, max_size=40).filter(
    lambda b: b"/" not in b and b"\0" not in b and b not in (b".", b"..")
) | st.text(min_size=1, max_size=40).map(os.fsencode).filter(
    lambda b: b"/" not in b and b"\0" not in b and b not in (b".", b"..") and len(b) < 250
)
_counter = itertools.count()


def carry_on(ws: Path, cli: Callable[..., Result]) -> None:
    """Listings work, and a new edit of the good conversation is committed."""
    w = open_workspace(ws)
    listed = {i.id for i in tree.listing(w.conv_root, include_hidden=True)}
    assert "good" in listed
    for argv in (("c", "ls", "--hidden"), ("tree", "--all")):
        shown = cli(*argv)
        assert shown.code == 0, (argv, shown.stderr)
        assert "good" in shown.stdout
    n = next(_counter)
    (ws / "conversations" / "good" / f"note{n}.md").write_text(f"{n}\n", encoding="utf-8")
    paths = edits.pending(w)
    assert paths is not None
    kept = [p for p in paths if not edits.unnamed(p, lambda _: None)]
    assert f"conversations/good/note{n}.md" in kept
    w.commit(Change(tuple(kept), "recover"))
    assert f"good/note{n}.md" in rgit(ws, "ls-tree", "-r", "--name-only", "HEAD")
    m = next(_counter)
    (ws / "conversations" / "good" / f"note{m}.md").write_text(f"{m}\n", encoding="utf-8")
    w.committer.commit_pending(subject="recover")
    assert f"good/note{m}.md" in rgit(ws, "ls-tree", "-r", "--name-only", "HEAD")


@pytest.fixture
def good(ws: Path, cli: Callable[..., Result]) -> Path:
    assert cli("c", "new", "good", "--no-activate").code == 0
    return ws


@SETTINGS
@given(name=NAMES)
def test_any_directory_name_under_the_root_breaks_nothing_else(
    good: Path, cli: Callable[..., Result], name: bytes
) -> None:
    root = os.fsencode(good / "conversations")
    path = os.path.join(root, name)
    assume(not os.path.lexists(path))
    try:
        os.mkdir(path)
    except OSError:
        assume(False)  # a name the file system refuses (too long, say)
    try:
        with open(os.path.join(path, b"notes.md"), "wb") as fh:
            fh.write(b"a user's notes\n")
        carry_on(good, cli)
    finally:
        shutil.rmtree(path)
        # Whatever of it was committed goes too, so the next example starts clean.
        cli("c", "ls")


@SETTINGS
@given(
    depth=st.integers(min_value=1, max_value=6000),
    opener=st.sampled_from(["[", "{a="]),
    where=st.sampled_from(["conversation.toml", "events"]),
)
def test_any_nesting_breaks_only_its_own_conversation(
    good: Path, cli: Callable[..., Result], depth: int, opener: str, where: str
) -> None:
    closer = {"[": "]", "{a=": "}"}[opener]
    value = opener * depth + "1" + closer * depth
    conv = good / "conversations" / "nested"
    conv.mkdir()
    try:
        if where == "conversation.toml":
            (conv / "conversation.toml").write_text(f"x = {value}\n", encoding="utf-8")
        else:
            (conv / "conversation.toml").write_text('title = "n"\n', encoding="utf-8")
            (conv / "events").mkdir()
            (conv / "events" / "0001-user.md").write_text(
                f"+++\nx = {value}\n+++\nhi\n", encoding="utf-8"
            )
        carry_on(good, cli)
        shown = cli("c", "print", "nested")
        assert shown.code in (0, 1), shown.stderr  # printed, or this one's clear error
        assert "Traceback" not in shown.stderr
    finally:
        shutil.rmtree(conv)


def test_huge_front_matter_is_that_conversations_error(
    good: Path, cli: Callable[..., Result]
) -> None:
    conv = good / "conversations" / "huge"
    (conv / "events").mkdir(parents=True)
    (conv / "conversation.toml").write_text('title = "huge"\n', encoding="utf-8")
    lines = "".join(f'k{n} = "{"x" * 80}"\n' for n in range(120_000))  # ~11 MB
    (conv / "events" / "0001-user.md").write_text(f"+++\n{lines}+++\nhi\n", encoding="utf-8")
    carry_on(good, cli)
    shown = cli("c", "print", "huge")
    assert shown.code == 1 and "Traceback" not in shown.stderr
    assert "bytes, over the 8388608 bytes jpfs reads" in shown.stderr, shown.stderr
