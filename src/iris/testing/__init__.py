"""The harness that starts throw-away clusters on loopback and cleans up after them: used by the
test fixtures, the benchmarks and `iris demo` alike.

Every one of them needs the same few things: a free port, a controller process started from a
config written into a folder, a deadline-bounded wait for a state, and a teardown that stops, by
PID, exactly what was started (the controller, then any attempt a killed controller left running).
Kept in one place, a fix to any of them (a port race, a lingering process) reaches all three.
`iris.testing.slurm` starts a throw-away real Slurm the same way, for the Slurm backend's tests
and its benchmark.
"""

from iris.core.polling import wait_until
from iris.testing.cluster import ClusterProcess, ClusterSet, free_port, local_backend
from iris.testing.processes import leftovers, pid_alive, process_group, processes_under

__all__ = [
    "ClusterProcess",
    "ClusterSet",
    "free_port",
    "leftovers",
    "local_backend",
    "pid_alive",
    "process_group",
    "processes_under",
    "wait_until",
]
