"""jpfs: delegate work to LLM sub-agents through plain files in a git repository."""

from __future__ import annotations

__version__ = "0.1.0"
