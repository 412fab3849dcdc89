"""Property-based tests: whatever bytes arrive, the parsers answer or raise jpfs's own
error, never crash with another exception (which would be exit 3 or a dead daemon)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jpfs.core import frontmatter, ids
from jpfs.core.config import load_file
from jpfs.core.state import has_content, split_rounds
from jpfs.errors import ConfigError, FormatError, IdError
from jpfs.infra import textfile

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.text())
def test_an_id_is_valid_or_refused_never_an_escape(text: str) -> None:
    try:
        conv_id = ids.validate(text)
    except IdError:
        return
    parts = conv_id.split("/")
    assert all(ids.SEGMENT_RE.fullmatch(p) and ".." not in p for p in parts)
    assert not conv_id.startswith("/") and "\0" not in conv_id
    assert ids.validate(conv_id) == conv_id
    assert ids.is_descendant(conv_id, "") and not ids.is_descendant(conv_id, conv_id)


@SETTINGS
@given(st.from_regex(r"[a-z0-9][a-z0-9-]{0,8}", fullmatch=True), st.text(min_size=1))
def test_ancestry_is_segment_wise(segment: str, suffix: str) -> None:
    glued = segment + suffix.replace("/", "")
    if glued != segment:
        assert not ids.is_descendant(glued, segment)


scalars = st.one_of(
    st.text(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.datetimes(timezones=st.just(dt.UTC)).map(lambda d: d.replace(microsecond=0)),
)
keys = st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True)


@SETTINGS
@given(st.dictionaries(keys, scalars, max_size=6), st.text())
def test_front_matter_round_trips(meta: dict[str, object], body: str) -> None:
    body = body.replace("\r", "")
    text = frontmatter.render(meta, body)
    parsed, parsed_body = frontmatter.parse(text)
    assert parsed == meta
    assert parsed_body == (body if not body or body.endswith("\n") else body + "\n")


@SETTINGS
@given(st.text())
def test_front_matter_parses_or_says_why(text: str) -> None:
    try:
        frontmatter.parse(text)
    except FormatError:
        pass


@SETTINGS
@given(st.binary())
def test_any_bytes_decode_or_say_why(data: bytes) -> None:
    try:
        text = textfile.decode(data, "f.md")
    except FormatError as exc:
        assert "f.md" in str(exc) and "byte" in str(exc)
        return
    assert "\r\n" not in text and not text.startswith("\ufeff")


@SETTINGS
@given(st.text())
def test_answer_rounds_never_crash(text: str) -> None:
    rounds = split_rounds(text)
    assert all(isinstance(n, int) and n >= 0 for n in rounds)
    for section in rounds.values():
        has_content(section)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=300))
def test_a_config_file_loads_or_says_why(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(data)
    try:
        load_file(path)
    except ConfigError as exc:
        assert str(path) in str(exc)
