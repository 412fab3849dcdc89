"""The hidden pre-filter of ``conversation grep``: a record it passes over is never
hidden, whatever TOML spells ``hidden`` with (the full parse only runs when it may be)."""

from __future__ import annotations

import tomllib

import pytest

from jpfs.services.views.search import _maybe_hidden

RECORDS = [
    "hidden = true\n",
    "hidden = false\n",
    "hidden=true",
    '  "hidden" = true\n',
    "'hidden'\t=\ttrue\n",
    'title = "a"\nhidden = true\n',
    "hidden = 1\n",
    'hidden = "yes"\n',
    "hidden.deep = true\n",
    'x = "hidden = true"\n',
    "notes = '''\nhidden = true\n'''\n",
    "unhidden = true\n",
    "hidden = falsey\n",
    "# hidden = true\n",
    "[config]\nhidden = true\n",
    "hidden = false # not true\n",
]


@pytest.mark.parametrize("text", RECORDS)
def test_a_record_passed_over_is_not_hidden(text: str) -> None:
    try:
        hidden = tomllib.loads(text).get("hidden", False)
    except tomllib.TOMLDecodeError:
        hidden = False  # a broken record is not hidden (and the search says nothing)
    if hidden:
        assert _maybe_hidden(text.encode())


def test_the_usual_records_are_passed_over() -> None:
    assert not _maybe_hidden(b'title = "t"\nhidden = false\n[config]\nmodel = "m"\n')
    assert not _maybe_hidden(b'title = "hidden = true"\n')
