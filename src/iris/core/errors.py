"""Typed errors, each mapping to exactly one Connect error code.

Kernels and the store raise these; the RPC layer turns them into Connect errors and the CLI into
exit codes, so a message written once reaches the user unchanged. `ERRORS_BY_CODE` is the one table
from a Connect code back to its type, built from the types' own `code`: the server answers with a
type's code, and the SDK, the peer client and the worker daemon raise the type the table names, so
an error keeps its type across every hop between processes and clusters.
"""

from __future__ import annotations


class IrisError(Exception):
    """Base class: `code` is the Connect error code the API answers with."""

    code = "internal"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidArgument(IrisError):
    code = "invalid_argument"


class NotFound(IrisError):
    code = "not_found"


class AlreadyExists(IrisError):
    code = "already_exists"


class PermissionDenied(IrisError):
    code = "permission_denied"


class FailedPrecondition(IrisError):
    code = "failed_precondition"


class Unavailable(IrisError):
    code = "unavailable"


class DiskFull(Unavailable):
    """The controller's disk is full: the write was refused whole, and succeeds again once space
    is freed."""


class Unauthenticated(IrisError):
    code = "unauthenticated"


ERRORS_BY_CODE: dict[str, type[IrisError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        NotFound,
        AlreadyExists,
        PermissionDenied,
        FailedPrecondition,
        Unavailable,
        Unauthenticated,
    )
}


def error_for_code(code: str, message: str) -> IrisError:
    """The typed error for a Connect code name (`not_found` → NotFound). A code without a type of its
    own keeps its name on a plain IrisError, so nothing the server said is lost."""
    cls = ERRORS_BY_CODE.get(code)
    if cls is not None:
        return cls(message)
    err = IrisError(message)
    err.code = code
    return err
