"""The owner of a loopback connection's client socket, asked of the kernel for that one socket."""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path

from iris.controller.auth import sockdiag
from iris.controller.auth.isolation import loopback_socket_uid

LOOPBACK = ipaddress.ip_address("127.0.0.1")


def test_socket_uid_of_a_live_loopback_connection_matches_the_proc_table(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as server:
        server_port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", server_port)) as client:
            client_port = client.getsockname()[1]
            uid = sockdiag.socket_uid((LOOPBACK, client_port), (LOOPBACK, server_port))
            assert uid == os.getuid()
            table = loopback_socket_uid("127.0.0.1", client_port, server_port, proc=Path("/proc"))
            assert table == uid
            (tmp_path / "proc").symlink_to("/proc")  # another path to the same table: the scan alone
            scanned_only = loopback_socket_uid("127.0.0.1", client_port, server_port, proc=tmp_path / "proc")
            assert scanned_only == uid  # the table scan, which the netlink answer replaces, agrees


def test_socket_uid_of_no_such_connection_is_none():
    with socket.create_server(("127.0.0.1", 0)) as server:
        server_port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", server_port)) as client:
            client_port = client.getsockname()[1]
            assert sockdiag.socket_uid((LOOPBACK, client_port), (LOOPBACK, server_port + 1 or 1)) is None
            assert loopback_socket_uid("127.0.0.1", client_port, server_port + 1) is None
