from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jpfs.core import frontmatter
from jpfs.errors import FormatError


def test_round_trip_keeps_body_and_types() -> None:
    created = dt.datetime(2026, 11, 22, 8, 0, tzinfo=dt.UTC)
    meta = {"role": "assistant", "created": created, "usage": {"input_tokens": 3}}
    text = frontmatter.render(meta, "hello\n+++ not a fence\n")
    assert text.startswith("+++\n")
    parsed, body = frontmatter.parse(text)
    assert parsed == meta
    assert body == "hello\n+++ not a fence\n"


def test_no_front_matter_is_all_body() -> None:
    assert frontmatter.parse("# just markdown\n") == ({}, "# just markdown\n")


def test_unclosed_front_matter_is_a_clear_error() -> None:
    with pytest.raises(FormatError, match="never closed"):
        frontmatter.parse("+++\nrole = 'x'\nbody\n", source="e.md")


def test_malformed_toml_names_the_file() -> None:
    with pytest.raises(FormatError, match=r"e\.md: malformed TOML"):
        frontmatter.parse("+++\nrole = \n+++\nbody\n", source="e.md")


_SIMPLE_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.text(),
    st.datetimes(timezones=st.just(dt.UTC)).map(lambda d: d.replace(microsecond=0)),
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True), _SIMPLE_VALUES))
def test_plain_front_matter_renders_as_tomlkit_does(meta: dict[str, object]) -> None:
    # The fast path for the usual event front matter writes exactly tomlkit's text.
    simple = frontmatter._render_simple(meta)
    assert simple is not None
    assert simple == frontmatter._render_tomlkit(meta)
    parsed, _ = frontmatter.parse(frontmatter.render(meta, "b"))
    assert parsed == {k: v for k, v in meta.items() if v is not None}


def test_other_front_matter_goes_through_tomlkit() -> None:
    for meta in ({"usage": {"a": 1}}, {"key with space": "v"}, {"f": 1.5},
                 {"t": dt.datetime(2026, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=2)))}):  # fmt: skip
        assert frontmatter._render_simple(meta) is None
