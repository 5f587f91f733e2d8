"""One table maps Connect codes to typed errors, both ways, for the server, the SDK and peers."""

from __future__ import annotations

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from iris.core import errors
from iris.core.errors import ERRORS_BY_CODE, error_for_code
from iris.rpc.errors import from_connect, to_connect
from iris.rpc.transport import error_from_code


def test_errors_every_type_round_trips_through_its_connect_code():
    for code, cls in ERRORS_BY_CODE.items():
        wire = to_connect(cls("why"))  # what the server answers with
        assert wire.code is Code[code.upper()] and wire.message == "why"
        for back in (from_connect(wire), error_from_code(code, "why")):  # the peer client, the SDK
            assert type(back) is cls and back.code == code and back.message == "why"


def test_errors_every_declared_type_answers_with_a_code_in_the_table():
    declared = {c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.IrisError)}
    for cls in declared - {errors.IrisError}:
        # a refinement (DiskFull is Unavailable) travels as its base's code and comes back as the base
        assert issubclass(cls, ERRORS_BY_CODE[cls.code]), cls
    assert set(ERRORS_BY_CODE.values()) <= declared
    assert type(from_connect(to_connect(errors.DiskFull("full")))) is errors.Unavailable


def test_errors_a_code_without_a_type_keeps_its_name():
    err = error_for_code("resource_exhausted", "too many")
    assert type(err) is errors.IrisError and err.code == "resource_exhausted"
    again = from_connect(to_connect(err))
    assert type(again) is errors.IrisError and again.code == "resource_exhausted" and again.message == "too many"
    assert from_connect(ConnectError(Code.NOT_FOUND, "gone"), "peer b: gone").message == "peer b: gone"
