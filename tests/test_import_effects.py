"""Importing jpfs fills nothing: no registry, no default App's tools, no cache.

Each adapter builds its App in its composition root (ARCHITECTURE.md); a module that
registered itself somewhere when imported would bring back what Structure II removed
(a toolbox that depends on which modules happen to be imported). So every ``jpfs``
module is imported in a fresh interpreter, each module's containers and caches are
measured as its own import ends, and none may have grown once all are imported.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import jpfs

PACKAGE = Path(jpfs.__file__).resolve().parent

PROBE = textwrap.dedent(
    """
    import collections, importlib, importlib.abc, importlib.util, json, pkgutil, sys, weakref

    CONTAINERS = (dict, list, set, collections.deque, weakref.WeakValueDictionary,
                  weakref.WeakKeyDictionary, weakref.WeakSet)
    at_import = {}

    def sizes(module):
        out = {}
        for name, value in vars(module).items():
            if name.startswith("__"):
                continue
            if isinstance(value, CONTAINERS):
                out[name] = len(value)
            elif getattr(value, "__module__", None) == module.__name__ and callable(
                getattr(value, "cache_info", None)
            ):
                out[name] = value.cache_info().currsize  # functools.cache / lru_cache
        return out

    class Watch(importlib.abc.MetaPathFinder):
        # Measures a jpfs module the moment its own code has run.
        def find_spec(self, name, path, target=None):
            if name != "jpfs" and not name.startswith("jpfs."):
                return None
            sys.meta_path.remove(self)
            try:
                spec = importlib.util.find_spec(name)
            finally:
                sys.meta_path.insert(0, self)
            if spec is not None and spec.loader is not None:
                run = spec.loader.exec_module

                def exec_module(module, run=run, name=name):
                    run(module)
                    at_import[name] = sizes(module)

                spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Watch())
    import jpfs

    for info in pkgutil.walk_packages(jpfs.__path__, "jpfs."):
        if info.name != "jpfs.__main__":  # it runs the CLI
            importlib.import_module(info.name)
    grown = {
        f"{name}.{attr}": [before[attr], size]
        for name, before in at_import.items()
        for attr, size in sizes(sys.modules[name]).items()
        if attr in before and size != before[attr]
    }
    from jpfs import api
    from jpfs.core import tool
    from jpfs.services.run import runtime

    # No global App remains: the App a runner built without one gets, and whether the
    # library's (the CLI's too, built on first use) was built by an import.
    bare = runtime.Runner.__dataclass_fields__["app"].default_factory()
    built = api.app.cache_info().currsize
    print(json.dumps({
        "modules": sorted(at_import),
        "grown": grown,
        "validators": len(tool._VALIDATORS),
        "toolbox": bare.toolbox is not None or built > 0,
        "starter": bare.starter is not None,
        "runs": len(bare.runs._runs) + built,
        "engines": len(bare.claims._engines) + len(bare.claims._own),
    }))
    """
)


def test_importing_every_module_fills_no_registry_and_builds_no_tools() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        check=False,
        cwd=PACKAGE.parent,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    every = {
        ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        for path in PACKAGE.rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert set(found["modules"]) == every - {"jpfs.__main__"}
    assert found["grown"] == {}, "filled by importing other modules"
    assert found["validators"] == 0
    assert not found["toolbox"] and not found["starter"]
    assert found["runs"] == 0 and found["engines"] == 0


def test_no_module_is_imported_for_its_side_effects() -> None:
    # An import kept only for what it does when imported (unused: a noqa of F401) is how
    # registries used to be filled; those left load a provider's SDK ahead of a run, on
    # purpose, each in its module's load_sdk.
    allowed = {PACKAGE / "infra" / "providers" / f"{name}.py" for name in ("anthropic", "openai")}
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        lines = [n for n, line in enumerate(text.splitlines(), 1) if "noqa: F401" in line]
        if not lines:
            continue
        assert path in allowed, path.relative_to(PACKAGE)
        (load,) = [
            node
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.FunctionDef) and node.name == "load_sdk"
        ]
        assert all(load.lineno <= n <= (load.end_lineno or 0) for n in lines)
