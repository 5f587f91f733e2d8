"""Converts between typed Iris errors and the Connect errors that carry them over the wire.

Both directions read `iris.core.errors`: an error's type names its code, and `ERRORS_BY_CODE`
names the type for a code, so the server, the peer client and the worker daemon cannot disagree
about what a code means. The SDK reads the same table from Connect JSON without importing
`connectrpc` at all (its startup budget has no room for it).
"""

from __future__ import annotations

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from iris.core.errors import IrisError, error_for_code


def to_connect(exc: IrisError) -> ConnectError:
    """The Connect error a typed error is answered with, message unchanged."""
    return ConnectError(Code[exc.code.upper()], exc.message)


def from_connect(exc: ConnectError, message: str | None = None) -> IrisError:
    """The typed error for a Connect error; `message` replaces the remote one when given."""
    return error_for_code(exc.code.name.lower(), exc.message if message is None else message)
