"""Refusals for length, read from each server's own words."""

from __future__ import annotations

import pytest

from jpfs.infra.providers import overflow


@pytest.mark.parametrize(
    ("message", "sizes"),
    [
        ("HTTP 400 invalid_request_error: prompt is too long: 219898 tokens > 200000 maximum",
         (219898, 200000)),
        ("input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, decrease"
         " input length or `max_tokens` and try again", (178959, 200000)),
        ("This model's maximum context length is 8192 tokens. However, your messages resulted"
         " in 9360 tokens. Please reduce the length of the messages.", (9360, 8192)),
        ("This model's maximum context length is 6048 tokens. However, you requested 6616"
         " tokens (568 in the messages, 6048 in the completion).", (568, 6048)),
        ("This model's maximum context length is 262144 tokens. However, you requested 128000"
         " output tokens and your prompt contains at least 134145 input tokens", (134145, 262144)),
        ("request (4390 tokens) exceeds the available context size (4096 tokens), try increasing"
         " it", (4390, 4096)),
        ("Input length (160062 tokens) exceeds the maximum allowed length (59862 tokens).",
         (160062, 59862)),
        ("This model's maximum context length is 4096 tokens.", (None, 4096)),
    ],
)  # fmt: skip
def test_each_servers_words_give_the_sizes(message: str, sizes: tuple[int | None, int]) -> None:
    assert overflow.parse(message) == sizes


def test_other_refusals_are_not_for_length() -> None:
    assert overflow.parse("HTTP 400 invalid_request_error: messages: roles must alternate") is None
    assert overflow.parse("max_tokens: 8192 > 4096, which is the maximum allowed") is None
