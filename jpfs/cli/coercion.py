"""Cheap parameter coercion for the CLI start-up.

Recent typer versions convert every parameter value through a pydantic
``TypeAdapter``: importing pydantic and building the adapters cost ~100 ms per
command, two thirds of a ``jpfs conversation ls`` (see bench/RESULTS.md). Most
values need no conversion: an option that was not given (``None``) or a string for a
``str`` parameter. Those are answered here; any other value still goes through
typer's own coercion, built on first use. With a typer that lacks the hook this
module wraps, :func:`install` does nothing and typer behaves as shipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


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
