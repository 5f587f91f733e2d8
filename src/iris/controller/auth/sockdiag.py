"""Finds the uid that owns one TCP socket, by asking the kernel for exactly that socket.

Why not `/proc/net/tcp`: the kernel builds that file by walking its whole socket table, which on
a busy 2-core host cost about 10 ms of CPU per read, and the controller asks once per tokenless
loopback request: half the controller's CPU for a submitted job went there. A sock_diag netlink
request naming both ends of the connection (`SOCK_DIAG_BY_FAMILY` without a dump flag) makes the
kernel look up that one socket and answer with its owner, in microseconds. psutil and friends read
`/proc/net/tcp` too, hence these few lines of struct packing. When netlink is unavailable or the
kernel knows no such socket, the caller falls back to the table.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
NO_COOKIE = 0xFFFFFFFF
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
_REQUEST = struct.Struct("=BBBxI")  # inet_diag_req_v2 up to its socket id: family, protocol, ext, states
_SOCKID = struct.Struct(">HH16s16s")  # inet_diag_sockid: ports and addresses, network byte order
_TAIL = struct.Struct("=III")  # interface, cookie (two words)
_UID_OFFSET = _HEADER.size + 4 + _SOCKID.size + _TAIL.size + 12  # inet_diag_msg.idiag_uid


def _packed(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bytes:
    return address.packed.ljust(16, b"\0")


def socket_uid(
    local: tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int],
    remote: tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int],
) -> int | None:
    """The uid owning the TCP socket bound to `local` and connected to `remote`; None when the
    kernel knows no such socket; OSError when netlink cannot be asked."""
    family = socket.AF_INET if local[0].version == 4 else socket.AF_INET6
    body = (
        _REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0xFFFFFFFF)
        + _SOCKID.pack(local[1], remote[1], _packed(local[0]), _packed(remote[0]))
        + _TAIL.pack(0, NO_COOKIE, NO_COOKIE)
    )
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(1.0)
        nl.send(_HEADER.pack(_HEADER.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0) + body)
        answer = nl.recv(8192)
    length, kind, _, _, _ = _HEADER.unpack_from(answer)
    if kind == NLMSG_ERROR:
        (error,) = struct.unpack_from("=i", answer, _HEADER.size)
        if -error == getattr(os, "ENOENT", 2):
            return None
        raise OSError(-error, os.strerror(-error))
    if kind != SOCK_DIAG_BY_FAMILY or length < _UID_OFFSET + 4:
        raise OSError("unexpected sock_diag answer")
    (uid,) = struct.unpack_from("=I", answer, _UID_OFFSET)
    return uid
