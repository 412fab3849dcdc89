"""jpfs: delegate work to LLM sub-agents through plain files in a git repository.

The library API (imported lazily, so ``import jpfs`` stays cheap for the CLI):

    from jpfs import onboard, reply, call, OnboardingHandle
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["OnboardingHandle", "call", "onboard", "reply"]

if TYPE_CHECKING:
    from jpfs.api import OnboardingHandle, call, onboard, reply


def __getattr__(name: str) -> Any:
    if name in __all__:
        from jpfs import api

        return getattr(api, name)
    raise AttributeError(f"module 'jpfs' has no attribute {name!r}")
