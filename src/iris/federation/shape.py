"""Whether a backend could host a job's shape, and the capacity gate a device request becomes.

Two filters live here because the router (at submit) and the placement pass (on the tick) must
agree on them exactly: a peer backend hosts a shape when its advertised attributes satisfy every
*routing* constraint of the job (DESIGN §6: routing keys only, a key the peer does not advertise
fails), and a local backend hosts it when one of its workers could, in principle, hold one task.

The capacity gate is what a device request means to a peer: N replicas of an 8×h100 job need 8N
h100 free on one backend, `ge(available:h100, 8N)`. A CPU job carries no gate and is matched on
shape alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from iris.core.constraints import AVAILABLE_PREFIX, Constraint, Op, device_constraints, matches
from iris.core.resources import Resources
from iris.federation.model import LocalBackendShape, PeerBackend

ANY_VARIANT = "*"  # a gate for `--gpu 8`: drawn from whatever variant the backend advertises

LocalFeasibility = Callable[[Resources, tuple[Constraint, ...]], bool]


@dataclass(frozen=True, slots=True)
class Gate:
    """A numeric capacity gate: at least `amount` of `token` free on a single backend."""

    token: str
    amount: int

    @property
    def constraint(self) -> Constraint:
        """The gate in constraint form, `available:<token> GE <amount>`."""
        return Constraint(AVAILABLE_PREFIX + self.token, Op.GE, (str(self.amount),))

    def token_on(self, backend: PeerBackend) -> str:
        """The availability token this gate draws from on `backend` ('' when it cannot tell)."""
        if self.token != ANY_VARIANT:
            return self.token
        variant = backend.attributes.get("device-variant", "").lower()
        if variant:
            return variant
        amounts = backend.availability.amounts if backend.availability is not None else {}
        return next(iter(amounts)) if len(amounts) == 1 else ""


def capacity_gate(resources: Resources, replicas: int) -> Gate | None:
    """The gate a job's device request becomes: replicas × count of its token; None for CPU jobs."""
    device = resources.device
    if not device.is_accelerator:
        return None
    return Gate(device.token or ANY_VARIANT, replicas * device.count)


def routing_constraints(resources: Resources, constraints: Iterable[Constraint]) -> tuple[Constraint, ...]:
    """The hard constraints a peer backend must satisfy: routing keys only, device ones included."""
    out: list[Constraint] = []
    for c in (*device_constraints(resources), *constraints):
        if c.is_routing and not c.preferred and c not in out:
            out.append(c)
    return tuple(out)


def peer_backend_hosts(backend: PeerBackend, routing: Sequence[Constraint]) -> bool:
    """True when `backend`'s advertised attributes satisfy every routing constraint."""
    return all(matches(c, backend.attributes) for c in routing)


def describe_constraints(constraints: Sequence[Constraint]) -> str:
    return ", ".join(str(c) for c in constraints) if constraints else "no routing constraints"


# --- local feasibility --------------------------------------------------------------------------

_LOCAL_SKIP_PREFIXES = (AVAILABLE_PREFIX,)
_LOCAL_SKIP_KEYS = frozenset({"cluster"})


def _device_fits(request: Resources, capacity: Resources) -> bool:
    want, have = request.device, capacity.device
    if not want.is_accelerator:
        return True
    if have.kind != want.kind or have.count < want.count:
        return False
    if want.variant and have.variant.lower() != want.variant.lower():
        return False
    return not want.topology or have.topology.lower() == want.topology.lower()


def _local_attributes(shape: LocalBackendShape) -> Mapping[str, object]:
    device = shape.worker_capacity.device
    derived: dict[str, object] = {"backend": shape.backend_id}
    if device.is_accelerator:
        derived.update({"device-type": device.kind, "gpu-count": device.count})
        if device.variant:
            derived["device-variant"] = device.variant
        if device.topology:
            derived["tpu-topology"] = device.topology
    else:
        derived["device-type"] = "cpu"
    return {**derived, **shape.attributes}


def local_shape_hosts(shape: LocalBackendShape, resources: Resources, constraints: Sequence[Constraint]) -> bool:
    """True when one worker of `shape` could in principle hold one task of this shape."""
    cap = shape.worker_capacity
    if resources.cpu > cap.cpu or resources.memory > cap.memory or resources.disk > cap.disk:
        return False
    if not _device_fits(resources, cap):
        return False
    attributes = _local_attributes(shape)
    for c in constraints:
        if c.preferred or c.key in _LOCAL_SKIP_KEYS or c.key.startswith(_LOCAL_SKIP_PREFIXES):
            continue
        if not matches(c, attributes):
            return False
    return True


def shapes_feasibility(
    shapes: Sequence[LocalBackendShape], members: Callable[[], Iterable[LocalBackendShape]] | None = None
) -> LocalFeasibility:
    """A local-feasibility check over a fixed list of local backend shapes, and over `members`:
    the workers now joined to backends without a fixed shape (pools of worker daemons), each as a
    shape of its own, asked at every check because hosts join and leave while the cluster runs."""
    frozen = tuple(shapes)

    def feasible(resources: Resources, constraints: tuple[Constraint, ...]) -> bool:
        if any(local_shape_hosts(s, resources, constraints) for s in frozen):
            return True
        return members is not None and any(local_shape_hosts(s, resources, constraints) for s in members())

    return feasible
