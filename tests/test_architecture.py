"""ARCHITECTURE.md's picture and capability table say what the code is.

import-linter enforces the layers (pyproject.toml); this test keeps the document that
draws them true: the picture lists the service packages in the contract's order, the
capability table names only modules that exist and every verb module somewhere, and the
Services section names each service module once.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from pathlib import Path

import jpfs

ROOT = Path(jpfs.__file__).resolve().parent.parent
PACKAGE = ROOT / "jpfs"
DOC = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")


def contracts() -> dict[str, dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    found = config["tool"]["importlinter"]["contracts"]
    return {str(c["name"]): c for c in found}


def services_order() -> list[str]:
    (contract,) = [c for c in contracts().values() if c.get("containers") == ["jpfs.services"]]
    layers = contract["layers"]
    assert isinstance(layers, list)
    return [str(layer) for layer in layers]


def modules(under: str) -> set[str]:
    base = PACKAGE / under
    return {
        str(path.relative_to(PACKAGE))
        for path in base.rglob("*.py")
        if path.name != "__init__.py" and "__pycache__" not in path.parts
    }


def section(start: str, end: str) -> str:
    begin = DOC.index(start)
    return DOC[begin : DOC.index(end, begin)]


def test_the_picture_draws_the_contracts_layers_in_order() -> None:
    picture = section("```\n", "\n```")
    boxed = re.findall(r"^\s*\|\s{3}(\w+)\s", picture, re.M)
    assert boxed == services_order()
    (outer,) = [c for c in contracts().values() if str(c["name"]).startswith("Layers:")]
    drawn = re.findall(r"jpfs/(\w+)", picture)
    layers = outer["layers"]
    assert isinstance(layers, list)
    named = [
        name.removeprefix("jpfs.") for layer in layers for name in re.split(r"\s*\|\s*", layer)
    ]
    assert [n for n in drawn if n in named] == [n for n in named if n in drawn]
    assert set(named) - set(drawn) <= {"__main__"}
    for package in services_order():
        assert (PACKAGE / "services" / package / "__init__.py").is_file(), package


def test_the_capability_table_names_real_modules_and_every_verb() -> None:
    table = section("| capability |", "\n\n")
    named: set[str] = set()
    for row in table.splitlines()[2:]:
        cells = row.strip("|").split("|")
        assert len(cells) == 4, row
        for column, cell in enumerate(cells):
            for token in re.findall(r"`([\w/]+(?:\.py|/\*))`", cell):
                path = token if column < 3 else f"core/{token}"
                if path.endswith("/*"):
                    found = modules(path[:-2])
                    assert found, f"{token}: no such package"
                    named |= found
                else:
                    assert (PACKAGE / path).is_file(), f"{token}: no such module"
                    named.add(path)
    verbs = modules("cli/commands") | modules("tools") | modules("services")
    assert verbs - named == set(), "modules no capability row names"


def test_the_services_section_names_each_module_once() -> None:
    text = section("### Services\n", "### Core\n")
    listed: list[str] = []
    for package, body in re.findall(r"^- `(\w+)/`:(.*?)(?=^- |\Z)", text, re.M | re.S):
        listed += [f"services/{package}/{name}" for name in re.findall(r"`(\w+\.py)`", body)]
    assert sorted(listed) == sorted(modules("services"))


def test_every_service_module_is_placed_in_its_packages_layers() -> None:
    # A module no layer names is held by no contract: it may import its siblings in any
    # direction unseen (import-linter checks only the modules a contract names).
    for package in services_order():
        base = PACKAGE / "services" / package
        found = {p.stem for p in base.glob("*.py") if p.name != "__init__.py"}
        found |= {p.parent.name for p in base.glob("*/__init__.py")}
        containing = [
            c for c in contracts().values() if c.get("containers") == [f"jpfs.services.{package}"]
        ]
        assert len(containing) == 1, f"services/{package}: no layers contract of its own"
        layers = containing[0]["layers"]
        assert isinstance(layers, list)
        named = [n for layer in layers for n in re.split(r"\s*[|:]\s*", str(layer))]
        assert sorted(named) == sorted(found), f"services/{package}"


def test_only_the_git_layer_imports_pygit2() -> None:
    # Its errors are translated to GitError there, once; a service that used it would
    # have to catch pygit2's own (or let one escape as a bug).
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        if re.search(r"^\s*(import|from) pygit2\b", path.read_text(encoding="utf-8"), re.M):
            assert rel.parts[:2] in {("infra", "git"), ("infra", "committer")}, rel


# Folders of tests/ that are not packages of jpfs/: the documentation's blocks and
# glossary, the hostile-input corpus, the reference documents' examples, and the npm
# client's installation.
NOT_PACKAGES = {"docs", "hostile", "seeds", "clients"}
# Packages whose tests live with their parent's: the CLI's commands (one module per verb)
# are run through the CLI's argv, in tests/cli/.
FOLDED = {"cli/commands"}


def test_the_tests_mirror_the_packages() -> None:
    """Every package of jpfs/ has its folder under tests/, at the same path, and every
    folder of tests/ is a package's (or one of NOT_PACKAGES): a package's tests are in
    one place, found from its path."""
    tests = ROOT / "tests"

    def folders(top: Path, keep: Callable[[Path], bool]) -> set[str]:
        return {
            str(d.relative_to(top))
            for d in top.rglob("*")
            if d.is_dir() and d.name != "__pycache__" and keep(d)
        }

    packages = folders(PACKAGE, lambda d: (d / "__init__.py").exists() and d.name != "templates")
    test_folders = folders(tests, lambda d: d.relative_to(tests).parts[0] not in NOT_PACKAGES)
    assert packages - FOLDED - test_folders == set(), "packages without a folder of tests"
    assert test_folders - packages == set(), "test folders that mirror no package"
    for folder in test_folders:
        modules = [m for m in (PACKAGE / folder).glob("*.py") if m.name != "__init__.py"]
        if modules:  # a package of packages (jpfs/services) holds only theirs
            assert list((tests / folder).glob("test_*.py")), f"tests/{folder} holds no tests"
