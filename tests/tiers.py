"""The quick tier (``make test-fast``): which tests it leaves out, found from the code.

A test is ``slow`` when it needs a process or a server that outlives a call: a jpfs
daemon, the MCP server (``jpfs mcp``, a process spoken to over stdio), a network server
(git daemon, smart HTTP, sshd, a misbehaving peer, and the local Messages and Chat API
servers that the agent tests talk to over HTTP) or the npm client. That is found, not
listed: a test is slow when its function, one of its fixtures, or a function or class of
``tests`` that any of them names (followed through the module's globals, to any depth)
names one of ``SLOW_NAMES``, makes one of ``SERVERS``, takes one of ``SLOW_FIXTURES``,
or starts ``jpfs daemon start|run|stop`` or ``jpfs mcp`` (those words side by side in a
call's arguments or a list). Property tests (hypothesis's ``@given``: tens of examples,
each with repositories of its own) are slow too, and the few tests slow by nature, not
by what they start, are in ``SLOW_TESTS``. ``make test`` runs every test.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import itertools
import sys
import types
from pathlib import Path

import pytest

# What starts a process or a server: tests/conftest.py's daemon, tests/gitservers.py's
# servers, test_daemon_helpers' daemon process, the MCP SDK's client (it starts the
# server it talks to: `jpfs mcp`, however its command line was written).
SLOW_NAMES = frozenset(
    {"running_daemon", "DaemonProc", "GitDaemon", "SmartHttp", "Sshd", "stdio_client"}
)
# The local API servers, made by a test or a fixture (a name in an annotation is no server).
SERVERS = frozenset({"MessagesServer", "ChatServer"})
# Fixtures named for clarity, or whose need is not in their code: the API servers (and
# `api_env` through them), the npm client (`claude`). Every fixture's body is followed
# like a test's: `daemon_proc` is found through DaemonProc.
SLOW_FIXTURES = frozenset({"messages_server", "chat_server", "claude"})
_DAEMON_VERBS = frozenset({"start", "run", "stop"})
# Slow by nature (module path -> test names; empty: all of the module's): the
# benchmarks run end to end (daemons, git servers), a wheel built and installed, a
# randomized comparison of two committers, signals at ten child processes one after
# another (a storm at each, or each spinning until its signal lands).
SLOW_TESTS: dict[str, frozenset[str]] = {
    "tests/test_bench_smoke.py": frozenset(),
    "tests/test_packaging.py": frozenset({"test_the_wheel_installs_and_runs_the_readmes_example"}),
    "tests/infra/committer/test_committer_differential.py": frozenset(
        {"test_fast_and_reference_committers_make_the_same_commits"}
    ),
    "tests/services/daemon/test_daemon_signals.py": frozenset(
        {
            "test_signals_landing_in_the_reconcilers_wait_never_strand_it",
            "test_a_signal_landing_inside_event_set_never_deadlocks",
        }
    ),
}

_verdicts: dict[object, str | None] = {}


def _starts_server(node: ast.AST) -> bool:
    """``"daemon", "start"`` (or ``"run"``, ``"stop"``) side by side, or ``"jpfs"`` and
    later ``"mcp"``, among a call's arguments or a list's items."""
    if isinstance(node, ast.Call):
        items = node.args
    elif isinstance(node, ast.List | ast.Tuple):
        items = node.elts
    else:
        return False
    words = [i.value if isinstance(i, ast.Constant) else None for i in items]
    if "--help" in words:
        return False
    if "jpfs" in words and "mcp" in words[words.index("jpfs") :]:
        return True
    return any(a == "daemon" and b in _DAEMON_VERBS for a, b in itertools.pairwise(words))


def _ours_name(module: object) -> bool:
    return isinstance(module, str) and (module == "tests" or module.startswith("tests."))


def _ours(obj: object) -> bool:
    return _ours_name(getattr(obj, "__module__", None))


def why_slow(obj: object) -> str | None:
    """Why ``obj`` (a function or class of ``tests``) needs a process or a server, or
    None when it does not."""
    if callable(obj):
        obj = inspect.unwrap(getattr(obj, "__func__", obj))
    if not isinstance(obj, types.FunctionType | type) or not _ours(obj):
        return None
    if obj in _verdicts:
        return _verdicts[obj]
    _verdicts[obj] = None  # a cycle through obj adds nothing
    verdict = _judge(obj)
    _verdicts[obj] = verdict
    return verdict


_Def = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


@functools.cache
def _definitions(filename: str) -> dict[tuple[str, int], _Def]:
    """A source file's functions and classes by (name, line of the def or of each of its
    decorators): one parse per file, not one ``inspect.getsource`` per function."""
    try:
        tree = ast.parse(Path(filename).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return {}
    found: dict[tuple[str, int], _Def] = {}
    for node in ast.walk(tree):
        if isinstance(node, _Def):
            for line in (node.lineno, *(d.lineno for d in node.decorator_list)):
                found.setdefault((node.name, line), node)
    return found


def _node_of(obj: types.FunctionType | type) -> _Def | None:
    if isinstance(obj, type):
        filename = getattr(sys.modules.get(obj.__module__), "__file__", None)
        nodes = _definitions(filename) if filename else {}
        return next((n for (name, _), n in nodes.items() if name == obj.__name__), None)
    code = obj.__code__
    return _definitions(code.co_filename).get((obj.__name__, code.co_firstlineno))


def _judge(obj: types.FunctionType | type) -> str | None:
    name = obj.__qualname__
    if obj.__name__ in SLOW_NAMES:
        return name
    tree = _node_of(obj)
    if tree is None:
        return None
    scope = vars(sys.modules[obj.__module__])
    for node in ast.walk(tree):
        if _starts_server(node):
            return f"{name} starts a jpfs daemon or MCP server"
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in SERVERS:
            return f"{name} makes a {getattr(node.func, 'id', '')}"
        if isinstance(node, ast.ImportFrom) and _ours_name(node.module):
            # a function-level import of a helper of tests (``from tests.x import serve``)
            module = importlib.import_module(str(node.module))
            scope = {
                **scope,
                **{a.asname or a.name: getattr(module, a.name, None) for a in node.names},
            }
            continue
        if isinstance(node, ast.Name):
            word, target = node.id, scope.get(node.id)
        elif isinstance(node, ast.Attribute):
            # module.name, for a module of tests (self.x and the like are not followed)
            owner = scope.get(node.value.id) if isinstance(node.value, ast.Name) else None
            word = node.attr
            target = getattr(owner, word, None) if isinstance(owner, types.ModuleType) else None
        else:
            continue
        if word in SLOW_NAMES:
            return f"{name} uses {word}"
        if target is not obj and (found := why_slow(target)):
            return f"{name} -> {found}"
    return None


def item_why_slow(item: pytest.Item) -> str | None:
    """Why a collected test is slow (its function, its fixtures), or None."""
    if item.get_closest_marker("slow"):
        return "marked slow"
    path, _, name = item.nodeid.partition("::")
    if path in SLOW_TESTS and (not SLOW_TESTS[path] or name.split("[")[0] in SLOW_TESTS[path]):
        return "slow by nature (SLOW_TESTS)"
    if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
        return "a property test (hypothesis: many examples)"
    names = getattr(item, "fixturenames", ())
    if slow := SLOW_FIXTURES.intersection(names):
        return f"fixture {sorted(slow)[0]}"
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    for fixture in names:
        for fixturedef in defs.get(fixture, ())[-1:]:
            if found := why_slow(fixturedef.func):
                return f"fixture {fixture}: {found}"
    return why_slow(getattr(item, "obj", None))


def mark_slow(items: list[pytest.Item]) -> None:
    for item in items:
        if item_why_slow(item) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
