"""Typed errors, each mapping to exactly one Connect error code.

Kernels and the store raise these; the RPC layer turns them into Connect errors and the CLI into
exit codes, so a message written once reaches the user unchanged.
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
