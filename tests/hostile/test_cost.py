"""Hostile cost data: a broken price table, and usage records that lie or are not files.
Each gets a clear error or is left out of the sums; nothing crashes, nothing hangs."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Result


@pytest.mark.parametrize(
    ("table", "error"),
    [
        ("prices = 3\n", "key 'prices' must be dict, got int 3"),
        ('[prices]\nm = "cheap"\n', 'prices."m" must be a table with input, output'),
        ('[prices."m"]\ninput = 1\n', 'prices."m": missing output, cache_read, cache_creation'),
        ('[prices."m"]\ninput = -1\noutput = 1\ncache_read = 1\ncache_creation = 1\n',
         'prices."m".input must be a finite number >= 0, got -1'),
        ('[prices."m"]\ninput = nan\noutput = 1\ncache_read = 1\ncache_creation = 1\n',
         'prices."m".input must be a finite number >= 0'),
        ('[prices."m"]\ninput = "1"\noutput = 1\ncache_read = 1\ncache_creation = 1\n',
         "prices.\"m\".input must be a number, got '1'"),
        ('[prices."m"]\ninput = 1\noutput = 1\ncache_read = 1\ncache_creation = 1\ncache = 2\n',
         "prices.\"m\": unknown key 'cache'"),
    ],
)  # fmt: skip
def test_a_broken_price_table_is_one_clear_error(
    ws: Path, cli: Callable[..., Result], table: str, error: str
) -> None:
    config = ws / ".jpfs" / "config.toml"
    # Instead of the shipped [prices] tables, and first in the file: a bare key there is
    # top-level, as a user means it.
    shipped = config.read_text(encoding="utf-8").split("\n[prices.")[0]
    config.write_text(table + "\n" + shipped, encoding="utf-8")
    result = cli("cost")
    assert result.code == 1
    assert result.stderr.count("\n") == 1 and error in result.stderr, result.stderr


BAD_LEDGERS = {
    "malformed": lambda p: p.write_text("[[call]\n", encoding="utf-8"),
    "not utf-8": lambda p: p.write_bytes(b'[[call]]\nmodel = "\xff"\n'),
    "a fifo": lambda p: os.mkfifo(p),
    "a link out": lambda p: p.symlink_to("/etc/hostname"),
    "a directory": lambda p: p.mkdir(),
    "calls not tables": lambda p: p.write_text('call = [1, "x"]\n', encoding="utf-8"),
}


@pytest.mark.parametrize("kind", list(BAD_LEDGERS))
def test_an_unreadable_usage_toml_is_left_out(
    ws: Path, cli: Callable[..., Result], kind: str
) -> None:
    assert cli("conversation", "new", "c1").code == 0
    BAD_LEDGERS[kind](ws / "conversations" / "c1" / "usage.toml")
    shown = cli("conversation", "show", "c1", "--format", "json")
    assert shown.code == 0, shown.stderr
    assert json.loads(shown.stdout)["usage"]["input_tokens"] == 0
    assert cli("tree", "--format", "json").code == 0
    assert cli("cost", "--format", "json").code == 0


def test_usage_that_lies_is_not_believed(ws: Path, cli: Callable[..., Result]) -> None:
    """Negative or non-number counts count 0; a cost that is negative or not finite is
    priced again from the table; a usage that is not a table is no call."""
    assert cli("conversation", "new", "c1").code == 0
    events = ws / "conversations" / "c1" / "events"
    events.mkdir()
    rows = [
        '[usage]\ninput_tokens = -5000\noutput_tokens = "many"\ncost_usd = -3.0',
        "[usage]\ninput_tokens = 1000\ncost_usd = nan",
        "[usage]\ninput_tokens = 1000\ncost_usd = inf",
        'usage = "lots"',
    ]
    for n, row in enumerate(rows, 1):
        text = f'+++\nrole = "assistant"\nmodel = "claude-sonnet-4-5"\n{row}\n+++\nx\n'
        (events / f"{n:04d}-assistant.md").write_text(text, encoding="utf-8")
    shown = json.loads(cli("conversation", "show", "c1", "--format", "json").stdout)
    assert shown["usage"]["input_tokens"] == 2000 and shown["usage"]["output_tokens"] == 0
    assert shown["usage"]["cost_usd"] == pytest.approx(2 * 1000 * 3 / 1e6)
