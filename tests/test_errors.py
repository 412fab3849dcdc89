"""The OS's errors that are the machine's fault, as the boundaries see them."""

from __future__ import annotations

import errno

import pytest

from jpfs.errors import JpfsError, RepositoryFault


@pytest.mark.parametrize(
    ("code", "fix"),
    [
        (errno.ENOSPC, "free some space"),
        (errno.EDQUOT, "free some space"),
        (errno.EROFS, "check the file system"),
        (errno.EIO, "check the file system"),
    ],
)
def test_the_storage_refusing_writes_is_the_machines_fault(code: int, fix: str) -> None:
    fault = RepositoryFault.of(OSError(code, "refused", "/repo/conversations/x/task.md"))
    assert fault is not None and isinstance(fault, JpfsError)
    assert (
        str(fault)
        == f"refused (/repo/conversations/x/task.md): {fix}; jpfs carries on once it can write"
    )


def test_a_fault_is_itself_and_other_errors_are_none() -> None:
    fault = RepositoryFault("Read-only file system")
    assert RepositoryFault.of(fault) is fault
    assert RepositoryFault.of(OSError(errno.EACCES, "Permission denied", "/x")) is None
    assert RepositoryFault.of(ValueError("no")) is None
    assert RepositoryFault.of(JpfsError("a user's error")) is None
