from __future__ import annotations

import datetime as dt

import pytest

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
