"""A server's refusal of a prompt for its length, read from its error message.

Each API words it its own way; the sizes in it teach a run the model's real window
(a profile that overstates it, a local server started with a smaller context) and the
prompt's real size, so the run can shrink its prompt and try again
(:class:`jpfs.errors.ContextOverflow`). The texts, as the servers send them:

    Anthropic   prompt is too long: 219898 tokens > 200000 maximum
                input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, ...
    OpenAI      This model's maximum context length is 8192 tokens. However, your messages
                resulted in 9360 tokens. ...
    vLLM        This model's maximum context length is 6048 tokens. However, you requested
                6616 tokens (568 in the messages, 6048 in the completion). ...
    llama.cpp   request (4390 tokens) exceeds the available context size (4096 tokens), ...
                {"n_prompt_tokens": 14429, "n_ctx": 8192, "type": "exceed_context_size_error"}
    SGLang      Input length (160062 tokens) exceeds the maximum allowed length (59862 tokens).
"""

from __future__ import annotations

import re

# Each pattern names its numbers: ``tokens`` (the prompt), ``window``.
_PATTERNS = tuple(
    re.compile(p)
    for p in (
        r"prompt is too long: (?P<tokens>\d+) tokens > (?P<window>\d+) maximum",
        r"input length and `?max_tokens`? exceed context limit: (?P<tokens>\d+) \+ \d+ > "
        r"(?P<window>\d+)",
        r"maximum context length is (?P<window>\d+) tokens\. However, you requested \d+ tokens"
        r" \((?P<tokens>\d+) in the messages",
        r"maximum context length is (?P<window>\d+) tokens\. However, your messages resulted in"
        r" (?P<tokens>\d+) tokens",
        r"maximum context length is (?P<window>\d+) tokens.{0,80}?prompt contains at least"
        r" (?P<tokens>\d+) input tokens",
        r"request \((?P<tokens>\d+) tokens\) exceeds the available context size"
        r" \((?P<window>\d+) tokens\)",
        r'"n_prompt_tokens": ?(?P<tokens>\d+), ?"n_ctx": ?(?P<window>\d+)',
        r"Input length \((?P<tokens>\d+) tokens\) exceeds the maximum allowed length"
        r" \((?P<window>\d+) tokens\)",
        r"maximum context length is (?P<window>\d+) tokens",
    )
)


def parse(message: str) -> tuple[int | None, int] | None:
    """(the prompt's tokens or None, the window) that ``message`` names, or None when it
    is no refusal for length."""
    for pattern in _PATTERNS:
        found = pattern.search(message)
        if found is not None:
            named = found.groupdict()
            tokens = named.get("tokens")
            return (int(tokens) if tokens is not None else None), int(named["window"])
    return None
