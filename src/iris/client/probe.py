"""Decides whether a cluster answers, in three words a person can act on: up, slow or down.

A controller under load (a tick committing thousands of tasks, a flood of submits) may take seconds
to answer, and calling it "down" then sends its users to restart a healthy cluster. So the probe
first opens a TCP connection, which the kernel accepts even while the controller is busy, and only
then asks for GetClusterInfo: a refused or unreachable address is down; a controller that accepted
the connection but answered late, or not within the limit, is slow; and either way the words of
the failure travel with the verdict.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

from iris.core.errors import IrisError, Unavailable
from iris.rpc.transport import ClientTls, ConnectTransport, parse_url

DEFAULT_TIMEOUT_S = 5.0
SLOW_S = 2.0  # an answer that took this long or longer is shown as slow
NO_LIMIT_S = 365 * 86400.0  # what a timeout of 0 (no limit) waits, as a finite socket timeout


@dataclass(frozen=True)
class ClusterProbe:
    status: str  # up | slow | down
    answered_in_s: float | None  # None: no answer came
    error: str  # "" when it answered


class _Unanswered(Unavailable):
    """The transport's failure of an exchange that had a connection, with its cause in words."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def probe_cluster(url: str, timeout: float = DEFAULT_TIMEOUT_S, tls: ClientTls | None = None) -> ClusterProbe:
    """Asks the controller at `url` for GetClusterInfo, waiting at most `timeout` seconds (0: no limit);
    `tls`: how an https controller's certificate is checked."""
    limit = timeout or NO_LIMIT_S
    began = time.monotonic()
    try:
        _scheme, host, port, _prefix = parse_url(url)
        with socket.create_connection((host, port), timeout=limit):
            pass
    except (OSError, IrisError) as exc:
        return ClusterProbe("down", None, _words(exc))
    left = max(limit - (time.monotonic() - began), 0.05)
    transport = ConnectTransport(
        url, timeout=left, on_unreachable=lambda _url, why: _Unanswered(why), local_socket=False, tls=tls
    )
    try:
        transport.call_json("GetClusterInfo", {})
    except _Unanswered as exc:
        if "within" in exc.reason or "timed out" in exc.reason:
            return ClusterProbe("slow", None, f"accepted the connection but gave no answer within {timeout:g}s")
        return ClusterProbe("down", None, exc.reason)
    except Unavailable as exc:  # an answer, but not an Iris controller's
        return ClusterProbe("down", None, exc.message)
    except IrisError as exc:  # a controller's error answer: it is up, and says why it refused
        return _answered(time.monotonic() - began, exc.message)
    finally:
        transport.close()
    return _answered(time.monotonic() - began, "")


def _answered(seconds: float, error: str) -> ClusterProbe:
    return ClusterProbe("slow" if seconds >= SLOW_S else "up", round(seconds, 3), error)


def _words(exc: BaseException) -> str:
    if isinstance(exc, IrisError):
        return exc.message
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError):
        return "no connection within the timeout"
    if isinstance(exc, socket.gaierror):
        return f"unknown host: {exc.strerror}"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
