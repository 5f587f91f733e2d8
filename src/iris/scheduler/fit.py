"""Decides whether a task can go on a worker: the hard-constraint filter, the capacity filter and
the preferred-constraint score.

These are small separate functions because the placement pass, preemption, the unschedulable
check and `explain` must agree exactly on what "fits" means; each of them asks these functions and
nothing else. Capacity is an integer vector (devices, cpu millicores, memory bytes, disk bytes) so
sums and differences are exact: no rounding can ever over-commit a worker.

A task's request is compiled once into a `Shape` (its demand vector and its normalised hard and
preferred constraints). Tasks of one job share a shape, so a tick with 100,000 pending tasks
compiles a handful of shapes, and every per-shape answer (which workers match, whether it can ever
fit) is computed once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from iris.core.constraints import AVAILABLE_PREFIX, Constraint, device_constraints, matches
from iris.core.resources import Resources
from iris.core.units import format_size
from iris.scheduler.snapshot import PendingTask, WorkerSnapshot

Vector = tuple[int, int, int, int]
DEVICES, CPU, MEMORY, DISK = 0, 1, 2, 3
DIMENSIONS = (DEVICES, CPU, MEMORY, DISK)
ZERO: Vector = (0, 0, 0, 0)

# Keys that only federation routing reads: a pin to a peer (`cluster=`) is satisfied by the time a
# task is pending on the pinned cluster, and `available:<token>` gates a peer's advertisement.
FEDERATION_ONLY_KEYS = frozenset({"cluster"})
# Group attributes that coscheduled replicas must share, most specific first.
GROUP_KEYS = ("tpu-name", "pool")


def demand(resources: Resources) -> Vector:
    """The integer vector a request (or a worker's total capacity) occupies."""
    device = resources.device
    devices = device.count if device.kind != "cpu" else 0
    return (devices, round(resources.cpu * 1000), resources.memory, resources.disk)


def fits(free: Vector, need: Vector) -> bool:
    """Capacity filter: every dimension of `need` is available in `free`."""
    return free[0] >= need[0] and free[1] >= need[1] and free[2] >= need[2] and free[3] >= need[3]


def copies(free: Vector, need: Vector, limit: int) -> int:
    """How many tasks of `need` fit in `free`, at most `limit`."""
    # Unrolled: placement and the group counts ask this on every change of free capacity.
    f0, f1, f2, f3 = free
    n0, n1, n2, n3 = need
    if f0 < n0 or f1 < n1 or f2 < n2 or f3 < n3:
        return 0  # short in some dimension, even one it does not ask for (a worker run over its capacity)
    best = limit
    if n0 > 0 and f0 // n0 < best:
        best = f0 // n0
    if n1 > 0 and f1 // n1 < best:
        best = f1 // n1
    # Memory and disk: `f // n < best` is `f < n * best` (n > 0), and a multiplication costs far less
    # than a division of multi-digit integers, so the quotient is taken only when it is the smaller.
    if n2 > 0 and f2 < n2 * best:
        best = f2 // n2
    if n3 > 0 and f3 < n3 * best:
        best = f3 // n3
    return best if best > 0 or best == limit else 0


def subtract(a: Vector, b: Vector, times: int = 1) -> Vector:
    return (a[0] - b[0] * times, a[1] - b[1] * times, a[2] - b[2] * times, a[3] - b[3] * times)


def add(a: Vector, b: Vector) -> Vector:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3])


def lower(a: Vector, b: Vector) -> Vector:
    """Element-wise minimum."""
    return (min(a[0], b[0]), min(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3]))


def short_dimensions(free: Vector, need: Vector) -> tuple[int, ...]:
    """The dimensions in which `free` falls short of `need`, devices first."""
    return tuple(d for d in DIMENSIONS if free[d] < need[d])


def amount(dim: int, value: int, token: str = "") -> str:
    """One dimension of a vector in words: `8 h100`, `4 cpu`, `16G memory`, `100G disk`."""
    if dim == DEVICES:
        return f"{value} {token or 'devices'}"
    if dim == CPU:
        return f"{value / 1000:g} cpu"
    return f"{format_size(max(value, 0))} {'memory' if dim == MEMORY else 'disk'}"


def describe(need: Vector, token: str = "") -> str:
    """A whole vector in words, skipping empty dimensions: `8 h100, 16 cpu, 64G memory`."""
    parts = [amount(d, need[d], token) for d in DIMENSIONS if need[d] > 0]
    return ", ".join(parts) or "nothing"


def normalize(constraint: Constraint) -> Constraint:
    """Lower-cases key and values, so comparisons never depend on how a user spelled them."""
    return Constraint(
        constraint.key.strip().lower(),
        constraint.op,
        tuple(str(v).strip().lower() for v in constraint.values),
        constraint.preferred,
    )


def is_local_key(key: str) -> bool:
    """False for keys only federation routing reads; the scheduler ignores those."""
    return key not in FEDERATION_ONLY_KEYS and not key.startswith(AVAILABLE_PREFIX)


class Constraints(tuple):
    """A shape's constraints in canonical order: a tuple that hashes in one step.

    Per-tick and per-index caches are keyed by a shape's constraints, looked up for every job;
    a plain tuple hashes each constraint again on every lookup (a Python-level `__hash__` per
    constraint), so the hash is computed once, when the shape is compiled. Equal to, and hashing
    as, the plain tuple of the same constraints.
    """

    _hash: int

    def __new__(cls, constraints: Iterable[Constraint]) -> Constraints:
        made = super().__new__(cls, constraints)
        made._hash = tuple.__hash__(made)
        return made

    def __hash__(self) -> int:
        return self._hash


def _canonical(constraints: Iterable[Constraint]) -> Constraints:
    unique = {c for c in constraints}
    return Constraints(sorted(unique, key=lambda c: (c.key, c.op.value, c.values)))


@dataclass(frozen=True, slots=True)
class Shape:
    """A compiled request: what a task occupies and where it may go. Equal for a job's tasks."""

    need: Vector
    hard: tuple[Constraint, ...]
    preferred: tuple[Constraint, ...]
    kind: str  # device kind: cpu, gpu or tpu
    token: str  # device variant ('' = any, or no accelerator)
    _hash: int = field(init=False, repr=False, compare=False)
    # The part of the shape that decides where it may preempt.
    evicts_among: tuple = field(init=False, repr=False, compare=False)
    # The part of the shape that decides which workers it may use.
    where: tuple[tuple[Constraint, ...], tuple[Constraint, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Shapes key every per-tick memo; hashing the constraint tuples on each lookup is the cost.
        object.__setattr__(self, "_hash", hash((self.need, self.hard, self.preferred, self.kind, self.token)))
        object.__setattr__(self, "evicts_among", (self.need, self.hard, self.kind, self.token))
        object.__setattr__(self, "where", (self.hard, self.preferred))

    def __hash__(self) -> int:
        return self._hash

    @property
    def accelerator(self) -> bool:
        return self.need[DEVICES] > 0

    @property
    def device_word(self) -> str:
        """How devices of this shape are named in sentences: `h100`, or `gpu` when any will do."""
        return self.token or self.kind

    def describe(self) -> str:
        return describe(self.need, self.device_word)


def compile_shape(
    resources: Resources, constraints: Iterable[Constraint], interned: dict[Constraints, Constraints] | None = None
) -> Shape:
    """Builds a task's shape: its demand, and its hard constraints including the device-derived
    ones. With `interned`, equal constraint tuples of different shapes are one object (a cache
    keyed by them then finds its entry by identity, without comparing constraints)."""
    local = [normalize(c) for c in constraints]
    local = [c for c in local if is_local_key(c.key)]
    hard = _canonical([c for c in local if not c.preferred] + [normalize(c) for c in device_constraints(resources)])
    preferred = _canonical(c for c in local if c.preferred)
    if interned is not None:
        hard = interned.setdefault(hard, hard)
        preferred = interned.setdefault(preferred, preferred)
    device = resources.device
    return Shape(
        need=demand(resources),
        hard=hard,
        preferred=preferred,
        kind=device.kind if device.is_accelerator else "cpu",
        token=device.token if device.is_accelerator else "",
    )


_MAX_IDENTITIES = 100_000  # (resources, constraints) objects a `ShapeCache` remembers by identity


class ShapeCache:
    """Compiles each distinct (resources, constraints) pair once (kept with the worker index
    across ticks: a shape is a function of the request alone).

    Tasks of one job share their resources and constraints objects, so a pair is looked up by
    the objects' identities first (hashing a `Resources` costs more than a lookup); an entry keeps
    the objects it was made for, so an identity can never be reused by another while it is kept.
    """

    def __init__(self) -> None:
        self._shapes: dict[tuple, Shape] = {}
        self._by_identity: dict[tuple[int, int], tuple[Resources, tuple[Constraint, ...], Shape]] = {}
        self._constraints: dict[Constraints, Constraints] = {}  # see `compile_shape`

    def __len__(self) -> int:
        return len(self._shapes)

    def of(self, task: PendingTask) -> Shape:
        resources, constraints = task.resources, task.constraints
        known = self._by_identity.get((id(resources), id(constraints)))
        if known is not None and known[0] is resources and known[1] is constraints:
            return known[2]
        key = (resources, constraints)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = compile_shape(resources, constraints, self._constraints)
        if len(self._by_identity) >= _MAX_IDENTITIES:
            self._by_identity.clear()  # objects of requests long gone: start afresh
        self._by_identity[(id(resources), id(constraints))] = (resources, constraints, shape)
        return shape


def worker_attributes(worker: WorkerSnapshot) -> dict[str, str]:
    """The attributes constraints match against: the worker's own, lower-cased keys, plus its
    backend id (for `backend=` pins). The worker id is matched separately, per worker."""
    attrs = {str(k).strip().lower(): v for k, v in worker.attributes.items() if v is not None}
    attrs["backend"] = worker.backend_id
    return attrs


def failing_constraints(constraints: Iterable[Constraint], attributes: Mapping[str, object]) -> tuple[Constraint, ...]:
    """Hard-constraint filter: the constraints that `attributes` do not satisfy (empty = passes)."""
    return tuple(c for c in constraints if not matches(c, attributes))


def satisfies(constraints: Iterable[Constraint], attributes: Mapping[str, object]) -> bool:
    return all(matches(c, attributes) for c in constraints)


def preference_score(preferred: Iterable[Constraint], attributes: Mapping[str, object]) -> int:
    """Soft-constraint score: how many PREFERRED constraints a worker satisfies (higher is better)."""
    return sum(1 for c in preferred if matches(c, attributes))


def worker_token(worker: WorkerSnapshot) -> str:
    """The device variant a worker offers ('' when it has no accelerator)."""
    device = worker.capacity.device
    if device.kind == "cpu" or device.count <= 0:
        return ""
    variant = device.token or str(worker.attributes.get("device-variant", "")).lower()
    return variant or device.kind


def preemption_allowed_on(shape: Shape, worker: WorkerSnapshot) -> bool:
    """Preemption stays within one device variant: an h100 task evicts only on h100 workers, an
    any-variant gpu task on gpu workers of its kind, and a cpu task only on workers without
    accelerators (evicting work from a GPU host to free cpu for a cpu task would waste the GPUs)."""
    token = worker_token(worker)
    if not shape.accelerator:
        return token == ""
    if shape.token:
        return token == shape.token
    return worker.capacity.device.kind == shape.kind


def group_of(attributes: Mapping[str, object], backend_id: str) -> tuple[str, str]:
    """The group a worker belongs to for coscheduling: its `tpu-name`, else its `pool`, else its
    backend (the hosts of one backend are assumed to share an interconnect when nothing finer is
    declared)."""
    for key in GROUP_KEYS:
        value = attributes.get(key)
        if value is not None and str(value) != "":
            return (key, str(value).lower())
    return ("backend", backend_id)
