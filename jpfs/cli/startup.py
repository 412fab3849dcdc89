"""What keeps ``jpfs`` start-up cheap (measured in bench/bench_cli.py, see bench/RESULTS.md).

* Recent typer versions convert every parameter value through a pydantic
  ``TypeAdapter``: importing pydantic and building the adapters cost ~100 ms per
  command. Most values need no conversion: an option that was not given (``None``)
  or a string for a ``str`` parameter. :func:`install` answers those directly; any
  other value still goes through typer's own coercion, built on first use. With a
  typer that lacks the hook it wraps, it does nothing.
* typer builds the click command of every registered command (signatures, type
  hints) before parsing anything, a cost that grows with each command group.
  :func:`only` hands it just the group or command being invoked.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import typer
from typer.core import TyperOption
from typer.main import get_command


def install() -> None:
    try:
        from typer import core
        from typer._coercion import RuntimeParam, TypeDescriptor
    except ImportError:
        return
    found = getattr(core, "build_runtime_param", None)
    if found is None or getattr(found, "jpfs_lazy", False):
        return
    build: Callable[[TypeDescriptor], RuntimeParam] = found

    @dataclass(frozen=True)
    class LazyRuntimeParam(RuntimeParam):
        descriptor: TypeDescriptor | None = None
        built: dict[str, RuntimeParam] = field(default_factory=dict)

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            # RuntimeParam.coerce has already answered None (an absent option).
            if type(value) is str and self.annotation is str and self.parameter_info.parser is None:
                return value
            if "real" not in self.built:
                self.built["real"] = build(self.descriptor)  # type: ignore[arg-type]
            return self.built["real"]._coerce_value(value, param=param, ctx=ctx)

    def lazy_build(descriptor: TypeDescriptor) -> RuntimeParam:
        if descriptor.file_annotation is not None:
            return build(descriptor)
        return LazyRuntimeParam(
            parameter_info=descriptor.parameter_info,
            annotation=descriptor.annotation,
            descriptor=descriptor,
        )

    lazy_build.jpfs_lazy = True  # type: ignore[attr-defined]
    core.build_runtime_param = lazy_build  # type: ignore[attr-defined]


def _pruned(app: typer.Typer, name: str | None) -> typer.Typer:
    out = copy.copy(app)
    out.registered_groups = [g for g in app.registered_groups if g.name == name]
    out.registered_commands = [
        c
        for c in app.registered_commands
        if (c.name or getattr(c.callback, "__name__", "").lower().replace("_", "-")) == name
    ]
    return out


def command_name(app: typer.Typer, args: Sequence[str]) -> str | None:
    """The group or command ``args`` invoke, past the root options and their values."""
    root = get_command(_pruned(app, None))
    takes_value = {
        opt
        for p in root.params
        if isinstance(p, TyperOption) and not p.is_flag and not p.count
        for opt in p.opts
    }
    it = iter(args)
    for arg in it:
        if arg == "--":
            return next(it, None)
        if not arg.startswith("-") or arg == "-":
            return arg
        if arg in takes_value:  # "-w DIR"; "-wDIR" and "--workspace=DIR" are one token
            next(it, None)
    return None


def only(app: typer.Typer, args: Sequence[str]) -> typer.Typer:
    """``app`` with only the group or command ``args`` invoke; all of it for ``--help``,
    no command or an unknown one (so click's errors and suggestions stay the same)."""
    pruned = _pruned(app, command_name(app, args))
    return pruned if pruned.registered_groups or pruned.registered_commands else app
