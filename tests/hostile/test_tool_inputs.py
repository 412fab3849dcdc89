"""Tool inputs are validated against each tool's own schema, in the core, once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jpfs.core.tool import check_arguments
from jpfs.errors import ToolError
from jpfs.tools.registry import catalog
from tests.conftest import rgit, write_profile

CONFIG: dict[str, Any] = {"name": "t", "tools": {"agents": ["helper"]}}
TOOLS = catalog(CONFIG)

BAD = [
    ("jp_conversation_print", {"id": "a", "last": -1}, "must be at least 0"),
    ("jp_conversation_print", {"id": "a", "last": -3}, "must be at least 0"),
    ("jp_conversation_print", {"id": "a", "last": "2"}, "must be of type integer"),
    ("jp_conversation_print", {"id": "a", "last": True}, "must be of type integer"),
    ("jp_conversation_print", {"id": ""}, "'id' must not be empty"),
    ("jp_conversation_print", {}, "missing required argument(s): id"),
    ("jp_conversation_print", {"id": "a", "lots": 1}, "unknown argument(s): lots"),
    ("jp_query", {"id": "", "query": "x"}, "'id' must not be empty"),
    ("jp_query", {"config": "nobody", "query": "x"}, "must be one of helper"),
    ("jp_query", {"config": "helper"}, "missing required argument(s): query"),
    ("jp_query", {"config": "helper", "query": "x", "overrides": [1]}, "must be of type string"),
    ("jp_conversation_grep", {"pattern": "x", "id": ""}, "'id' must not be empty"),
    ("kill", {"id": ""}, "'id' must not be empty"),
    ("mail_read", {"id": ""}, "'id' must not be empty"),
    ("fs_read_file", {"path": ["a"]}, "must be of type string"),
]


@pytest.mark.parametrize(("tool", "args", "message"), BAD)
def test_an_input_outside_the_schema_is_refused_with_what_to_fix(
    tool: str, args: dict[str, Any], message: str
) -> None:
    with pytest.raises(ToolError) as caught:
        check_arguments(TOOLS[tool], args)
    text = str(caught.value)
    assert text.startswith(f"{tool}: ") and message in text
    assert "\n" not in text


def test_nulls_count_as_absent_and_valid_input_passes() -> None:
    assert check_arguments(TOOLS["jp_conversation_print"], {"id": "a", "last": None}) == {"id": "a"}
    assert check_arguments(TOOLS["jp_query"], {"id": "a/b", "query": "go on"}) == {
        "id": "a/b",
        "query": "go on",
    }


def test_a_bad_last_is_refused_alike_by_the_cli_and_the_tools(ws: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """One check in the core: `--last -3` is the same error through every way in."""
    from jpfs.core.tool import ToolContext, check_arguments
    from jpfs.core.workspace import open_workspace
    from jpfs.errors import JpfsError
    from jpfs.tools.registry import build_tools

    assert cli("c", "new", "a", "--no-activate").code == 0
    assert cli("c", "new", "a/b", "--no-activate").code == 0
    head = rgit(ws, "rev-parse", "HEAD")
    for argv in (("c", "fork", "a", "--last", "-3"), ("c", "print", "a", "--last", "-3")):
        refused = cli(*argv)
        assert refused.code == 2, (argv, refused.stderr)
        assert "argument 'last' must be at least 0, got -3" in refused.stderr
    assert rgit(ws, "rev-parse", "HEAD") == head  # no half-made child
    w = open_workspace(ws)
    tool = build_tools({"tools": {"allow": ["jp_conversation_print"]}}, None)[
        "jp_conversation_print"
    ]
    ctx = ToolContext(w.root, "a", w.root, workspace=w)
    with pytest.raises(JpfsError, match="last"):
        tool.run(ctx, check_arguments(tool, {"id": "a/b", "last": -3}))


# The same bad input through each way in: (CLI argv, its exit status, tool, tool
# arguments, the words every one of them says). {child} is a descendant of the caller.
# An argument out of range is a usage error (2); an id that cannot be one, like any id
# that names nothing, is an error (1).
THREE_WAYS = [
    (("c", "print", "{child}", "--last", "-3"), 2, "jp_conversation_print",
     {"id": "{child}", "last": -3}, "argument 'last' must be at least 0"),
    (("query", "--agent", "quick", "--new", "--budget-tokens", "0", "hi"), 2, "jp_query",
     {"config": "quick", "query": "hi", "budget_tokens": 0},
     "argument 'budget_tokens' must be at least 1"),
    (("query", "--agent", "quick", "--new", "--budget-usd", "-1", "hi"), 2, "jp_query",
     {"config": "quick", "query": "hi", "budget_usd": -1},
     "argument 'budget_usd' must be greater than 0"),
    (("c", "print", ""), 1, "jp_conversation_print", {"id": ""}, "must not be empty"),
]  # fmt: skip


def test_the_same_bad_inputs_get_the_same_error_through_cli_tools_and_mcp(
    ws: Path, cli: Any, tmp_path: Path
) -> None:
    """One validation path: the CLI (exit 2), an agent's tool call and an MCP client
    get the same words for the same bad input, and nothing is created."""
    import anyio

    from jpfs.core.tool import ToolContext
    from jpfs.core.workspace import open_workspace
    from jpfs.errors import JpfsError
    from jpfs.tools.registry import build_tools
    from tests.mcp.test_mcp import QUICK, call, serve

    write_profile(ws, "quick", QUICK, allowed=True)
    assert cli("c", "new", "a", "--no-activate").code == 0
    assert cli("c", "new", "a/b", "--no-activate").code == 0
    head = rgit(ws, "rev-parse", "HEAD")

    def fill(value: Any, child: str) -> Any:
        return value.replace("{child}", child) if isinstance(value, str) else value

    for argv, code, _, _, words in THREE_WAYS:
        refused = cli(*(fill(a, "a/b") for a in argv))
        assert refused.code == code and words in refused.stderr, (argv, refused.stderr)

    w = open_workspace(ws)
    config = {"tools": {"allow": ["jp_conversation_print", "jp_query"], "agents": ["quick"]}}
    tools = build_tools(config, w.agents_dir)
    ctx = ToolContext(w.root, "a", w.root, workspace=w)
    for _, _, name, args, words in THREE_WAYS:
        filled = {k: fill(v, "a/b") for k, v in args.items()}
        with pytest.raises(JpfsError) as caught:
            tools[name].run(ctx, check_arguments(tools[name], filled))
        assert words in str(caught.value), (name, filled, caught.value)
    assert rgit(ws, "rev-parse", "HEAD") == head  # nothing made by a refused input

    async def through_mcp() -> None:
        async with serve(ws, tmp_path / "server.err", "--agent", "quick") as session:
            text, err = await call(session, "jp_query", config="quick", query="hello")
            assert not err, text
            child = text.split('conversation_id="', 1)[1].split('"', 1)[0]
            for _, _, name, args, words in THREE_WAYS:
                filled = {k: fill(v, child) for k, v in args.items()}
                text, err = await call(session, name, **filled)
                assert err and words in text, (name, filled, text)

    anyio.run(through_mcp)
