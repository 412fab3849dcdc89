"""The query socket's schema is made from the request's dataclass (handoff.QueryRequest): the
same schema the daemon checked requests with when it was written by hand."""

from __future__ import annotations

import dataclasses
import json

import pytest

from jpfs.services.daemon import queryserver
from jpfs.services.run import handoff

_STRING_OR_NULL = {"type": ["string", "null"]}
# The schema as it was written beside handoff.QueryRequest before it was made from it.
WRITTEN = {
    "type": "object",
    "additionalProperties": False,
    "required": ["v", "text", "cfg", "env"],
    "properties": {
        "v": {"const": handoff.VERSION},
        "text": {"type": "string"},
        "conv_id": _STRING_OR_NULL,
        "new": {"type": "boolean"},
        "agent": _STRING_OR_NULL,
        "root_id": _STRING_OR_NULL,
        "hidden": {"type": "boolean"},
        "tmp": _STRING_OR_NULL,
        "activate": {"type": "boolean"},
        "onboard": {"enum": [False, None]},
        "budget_tokens": {"type": ["integer", "null"], "minimum": 1},
        "budget_usd": {"type": ["number", "null"], "exclusiveMinimum": 0},
        "stream": {"type": "boolean"},
        "cfg": {"type": "array", "items": {"type": "string"}},
        "env": {"type": "string"},
    },
}


def line(**fields: object) -> bytes:
    return json.dumps(
        {"v": handoff.VERSION, "text": "hi", "cfg": [], "env": "x", **fields}
    ).encode()


def test_the_schema_made_from_the_request_is_the_one_written_by_hand() -> None:
    assert queryserver.SCHEMA == WRITTEN


@pytest.mark.parametrize(
    "fields",
    [{}, {"onboard": False}, {"onboard": None}, {"budget_tokens": 1}, {"budget_usd": 0.5},
     {"conv_id": None, "new": True, "tmp": "1h", "stream": True}],
)  # fmt: skip
def test_requests_the_daemon_takes(fields: dict[str, object]) -> None:
    handed = queryserver.parse(line(**fields))
    assert {k: getattr(handed.request, k) for k in fields if k != "stream"} == {
        k: v for k, v in fields.items() if k != "stream"
    }
    assert handed.request.text == "hi" and (handed.cfg, handed.env) == ((), "x")
    assert handed.stream is bool(fields.get("stream", False))


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"rm_rf": True}, "'rm_rf' was unexpected"),
        ({"text": 42}, "text: 42 is not of type 'string'"),
        ({"v": 99}, "v: 1 was expected"),
        ({"onboard": True}, "onboard: True is not one of [False, None]"),
        ({"budget_tokens": 0}, "budget_tokens: 0 is less than the minimum of 1"),
        ({"budget_usd": 0}, "budget_usd: 0 is less than or equal to the minimum of 0"),
        ({"new": "yes"}, "new: 'yes' is not of type 'boolean'"),
    ],
)
def test_requests_the_daemon_refuses(fields: dict[str, object], said: str) -> None:
    with pytest.raises(queryserver.BadRequest, match=r"^bad request") as caught:
        queryserver.parse(line(**fields))
    assert said in str(caught.value)


def test_a_field_added_to_the_request_is_one_the_schema_checks() -> None:
    @dataclasses.dataclass(frozen=True)
    class Wider(handoff.QueryRequest):
        priority: int | None = None

    properties, required = queryserver.request_schema(Wider)
    assert properties["priority"] == {"type": ["integer", "null"]} and required == ["text"]
