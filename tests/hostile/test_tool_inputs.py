"""Tool inputs are validated against each tool's own schema, in the core, once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jpfs.core.tool import check_arguments
from jpfs.errors import ToolError
from jpfs.tools.registry import catalog
from tests.conftest import rgit

CONFIG: dict[str, Any] = {"name": "t", "tools": {"agents": ["helper"]}}
TOOLS = catalog(CONFIG)

BAD = [
    ("jp_conversation_print", {"id": "a", "last": 0}, "must be at least 1"),
    ("jp_conversation_print", {"id": "a", "last": -3}, "must be at least 1"),
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
        assert "last must be a number of events >= 0, got -3" in refused.stderr
    assert rgit(ws, "rev-parse", "HEAD") == head  # no half-made child
    w = open_workspace(ws)
    tool = build_tools({"tools": {"allow": ["jp_conversation_print"]}}, None)[
        "jp_conversation_print"
    ]
    ctx = ToolContext(w.root, "a", w.root, services={"ws": w})
    with pytest.raises(JpfsError, match="last"):
        tool.run(ctx, check_arguments(tool, {"id": "a/b", "last": -3}))
