"""Ids typed as prefixes (#50), against generated trees: whatever is typed, resolution
answers an existing conversation inside the caller's subtree or refuses with jpfs's own
error, and neither its answer nor its error names or counts anything outside; every
short id a listing shows reads back as its conversation."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jpfs.core import ids, scope, shortids, tree
from jpfs.errors import ArgumentError, IdError, JpfsError, NotFoundError, ScopeError

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Few letters, so that prefixes collide often; generated-form names sharing a long head.
names = st.one_of(
    st.from_regex(r"[ab][ab1]{0,3}", fullmatch=True),
    st.from_regex(r"c-01aaaaaa[ab]{2}[0-9a-z]{16}", fullmatch=True),
)
paths = st.lists(st.lists(names, min_size=1, max_size=3), min_size=1, max_size=12)
# The scope root's own name and everything outside it carry a mark, so an error that
# named or counted them would show it.
OUTSIDE = "zq"


def build(root: Path, shapes: list[list[str]], scope_root: str) -> set[str]:
    """The conversations: each path made (every level a conversation), under
    ``scope_root`` and beside it outside; a symlink inside pointing outside."""
    made: set[str] = set()
    for shape in shapes:
        for base in (scope_root, OUTSIDE + "b"):
            parts = [*base.split("/"), *shape]
            for depth in range(1, len(parts) + 1):
                conv_id = "/".join(parts[:depth])
                path = root.joinpath(*parts[:depth])
                path.mkdir(exist_ok=True)
                (path / "task.md").touch()
                made.add(conv_id)
    link = root.joinpath(*scope_root.split("/"), "alink")
    if not os.path.lexists(link):
        link.symlink_to(root / (OUTSIDE + "b"))
    return made


@SETTINGS
@given(paths, st.text(max_size=40))
def test_a_typed_id_resolves_inside_its_scope_or_is_refused_naming_nothing_outside(
    shapes: list[list[str]], typed: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        within = OUTSIDE + "a"
        made = build(root, shapes, within)
        outside = {c for c in made if not ids.is_descendant(c, within, strict=False)}
        for text in (typed, f"{within}/{typed}", f"{within[:2]}/{typed}"):
            try:
                got = scope.resolve(root, text, within=within)
            except (IdError, ScopeError, NotFoundError, ArgumentError) as err:
                said = str(err).replace(repr(text), "").replace(repr(within), "")
                for conv_id in outside:
                    assert conv_id not in said, (text, said)
                continue
            except JpfsError as err:  # pragma: no cover - a kind resolution never raises
                raise AssertionError(f"{type(err).__name__}: {err}") from err
            assert got in made and ids.is_descendant(got, within), (text, got)
            assert "alink" not in got.split("/")


@SETTINGS
@given(paths)
def test_every_short_id_reads_back_as_its_conversation(shapes: list[list[str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        within = OUTSIDE + "a"
        made = build(root, shapes, within)
        whole = shortids.Shortener(root)
        under = shortids.Shortener(root, within)
        # As a listing shortens: with the levels its walk read (whole, and under a --root
        # whose ancestors it did not walk), the very same short ids.
        walked: dict[str, list[str]] = {}
        tree.listing(root, include_hidden=True, levels=walked)
        below: dict[str, list[str]] = {}
        tree.listing(root, within, include_hidden=True, levels=below)
        assert all((ids.parent(conv_id) or "") in walked for conv_id in made)
        seeded = shortids.Shortener(root, known=walked)
        seeded_under = shortids.Shortener(root, within, known=below)
        for conv_id in sorted(made):
            short = whole(conv_id)
            assert short.count("/") == conv_id.count("/")
            assert scope.resolve(root, short) == conv_id, short
            assert seeded(conv_id) == short
            if ids.is_descendant(conv_id, within):
                assert scope.resolve(root, under(conv_id), within=within) == conv_id
                assert seeded_under(conv_id) == under(conv_id)
