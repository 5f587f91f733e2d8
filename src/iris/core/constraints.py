"""Placement constraints and the registry that says which keys exist and how each is matched.

A constraint is `key op value(s)`, REQUIRED or PREFERRED. The registry declares each key's kind
(a tag compared as a string, or a numeric consumable), the ops it allows, and whether federation
routing matches on it. Keeping that in one table means submit-time validation, the scheduler's fit
filters, `explain` and the federation router can never disagree about what a key means.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from iris.core.errors import InvalidArgument
from iris.core.resources import Resources
from iris.core.suggest import did_you_mean


class Op(str, enum.Enum):
    EQ = "EQ"
    NE = "NE"
    IN = "IN"
    EXISTS = "EXISTS"
    NOT_EXISTS = "NOT_EXISTS"
    GT = "GT"
    GE = "GE"
    LT = "LT"
    LE = "LE"

    @staticmethod
    def parse(value: str) -> Op:
        try:
            return Op[str(value).strip().upper()]
        except KeyError:
            raise InvalidArgument(
                f"constraint op {value!r} is not known; use one of {', '.join(o.value for o in Op)}"
            ) from None


TAG_OPS = frozenset({Op.EQ, Op.NE, Op.IN, Op.EXISTS, Op.NOT_EXISTS})
NUMERIC_OPS = frozenset({Op.EQ, Op.NE, Op.GT, Op.GE, Op.LT, Op.LE, Op.EXISTS, Op.NOT_EXISTS})


@dataclass(frozen=True, slots=True)
class KeySpec:
    key: str
    kind: str  # "tag" or "consumable"
    ops: frozenset[Op]
    routing: bool
    help: str


REGISTRY: dict[str, KeySpec] = {
    spec.key: spec
    for spec in (
        KeySpec("device-type", "tag", TAG_OPS, True, "cpu, gpu or tpu"),
        KeySpec("device-variant", "tag", TAG_OPS, True, "accelerator variant, e.g. h100, gb200, v5p"),
        KeySpec("preemptible", "tag", TAG_OPS, True, "whether the host may be reclaimed (true/false)"),
        KeySpec("region", "tag", TAG_OPS, True, "cloud region, e.g. us-east5"),
        KeySpec("zone", "tag", TAG_OPS, True, "cloud zone, e.g. us-east5-a"),
        KeySpec("gpu-count", "consumable", NUMERIC_OPS, False, "accelerators per host"),
        KeySpec("tpu-topology", "tag", TAG_OPS, False, "TPU slice topology, e.g. v5p-8"),
        KeySpec("pool", "tag", TAG_OPS, False, "a group of hosts that share an interconnect"),
        KeySpec("tpu-name", "tag", TAG_OPS, False, "the TPU slice a host belongs to"),
        KeySpec("worker", "tag", TAG_OPS, False, "a worker id"),
        KeySpec(
            "runtime", "tag", TAG_OPS, False, "how a worker runs attempts: process or docker (--image needs docker)"
        ),
        KeySpec("backend", "tag", frozenset({Op.EQ, Op.IN}), False, "pin to a local backend id"),
        KeySpec("cluster", "tag", frozenset({Op.EQ}), False, "pin to a federation peer (--target-cluster)"),
    )
}
AVAILABLE_PREFIX = "available:"
ANY_REGION = "any"  # `--region any`: opt out of inheriting the parent's region/zone.
ROUTING_KEYS = frozenset(k for k, s in REGISTRY.items() if s.routing)


def spec_for(key: str) -> KeySpec:
    """Returns the registry entry for `key`, including the `available:<token>` family."""
    if key.startswith(AVAILABLE_PREFIX) and len(key) > len(AVAILABLE_PREFIX):
        return KeySpec(key, "consumable", frozenset({Op.GE, Op.GT}), False, "advertised free capacity")
    spec = REGISTRY.get(key)
    if spec is None:
        hint = did_you_mean(key, REGISTRY)
        raise InvalidArgument(
            f"constraint key {key!r} is not known; {hint + ' ' if hint else ''}known keys: {', '.join(sorted(REGISTRY))}"
        )
    return spec


@dataclass(frozen=True, slots=True)
class Constraint:
    key: str
    op: Op
    values: tuple[str, ...] = ()
    preferred: bool = False

    def __str__(self) -> str:
        vals = ",".join(self.values)
        soft = " (preferred)" if self.preferred else ""
        if self.op in (Op.EXISTS, Op.NOT_EXISTS):
            return f"{self.key} {self.op.value}{soft}"
        return f"{self.key} {self.op.value} {vals}{soft}"

    @property
    def is_routing(self) -> bool:
        return self.key in ROUTING_KEYS


def make_constraint(key: str, op: str | Op, values: Iterable[str] = (), preferred: bool = False) -> Constraint:
    """Validates and normalises a constraint: known key, allowed op, right number of values."""
    key = str(key).strip().lower()
    spec = spec_for(key)
    op = op if isinstance(op, Op) else Op.parse(op)
    if op not in spec.ops:
        raise InvalidArgument(
            f"constraint op {op.value} is not allowed on key {key!r}; allowed: {', '.join(sorted(o.value for o in spec.ops))}"
        )
    vals = tuple(str(v).strip().lower() for v in values)
    if op in (Op.EXISTS, Op.NOT_EXISTS):
        if vals:
            raise InvalidArgument(f"constraint {key} {op.value} takes no value")
    elif op is Op.IN:
        if not vals:
            raise InvalidArgument(f"constraint {key} IN needs at least one value")
    elif len(vals) != 1:
        raise InvalidArgument(f"constraint {key} {op.value} needs exactly one value")
    if spec.kind == "consumable" and op not in (Op.EXISTS, Op.NOT_EXISTS):
        for v in vals:
            try:
                float(v)
            except ValueError:
                raise InvalidArgument(f"constraint {key} {op.value} needs a number, got {v!r}") from None
    return Constraint(key, op, vals, preferred)


def parse_constraint_text(text: str, preferred: bool = False) -> Constraint:
    """Parses the CLI form: `key=value`, `key!=value`, `key>=4`, `key in a,b`, `key exists`."""
    t = text.strip()
    lowered = t.lower()
    for word, op in ((" not_exists", Op.NOT_EXISTS), (" exists", Op.EXISTS)):
        if lowered.endswith(word):
            return make_constraint(t[: -len(word)], op, (), preferred)
    if " in " in lowered:
        idx = lowered.index(" in ")
        return make_constraint(t[:idx], Op.IN, [v for v in t[idx + 4 :].split(",") if v.strip()], preferred)
    for sym, op in (("!=", Op.NE), (">=", Op.GE), ("<=", Op.LE), ("=", Op.EQ), (">", Op.GT), ("<", Op.LT)):
        if sym in t:
            key, _, value = t.partition(sym)
            if value.strip()[:1] in ("=", "!", "<", ">"):
                raise InvalidArgument(
                    f"constraint {text!r} has a doubled operator; write {key.strip()}{sym}{value.strip().lstrip('=!<>')}"
                )
            if not value.strip():
                raise InvalidArgument(f"constraint {text!r} has no value after {sym!r}; e.g. {key.strip()}{sym}VALUE")
            return make_constraint(key, op, (value,), preferred)
    raise InvalidArgument(
        f"constraint {text!r} is not understood; use key=value, key!=value, key>=N, 'key in a,b' or 'key exists'"
    )


def _as_number(value: object) -> float | None:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def matches(constraint: Constraint, attributes: Mapping[str, object]) -> bool:
    """True when a worker (or peer backend) with `attributes` satisfies `constraint`.

    A missing attribute fails every op except NOT_EXISTS (and NE, which a host without the key
    cannot be said to satisfy either: a peer that does not advertise a key never takes a job
    that names it).
    """
    present = constraint.key in attributes and attributes[constraint.key] is not None
    op = constraint.op
    if op is Op.EXISTS:
        return present
    if op is Op.NOT_EXISTS:
        return not present
    if not present:
        return False
    actual = attributes[constraint.key]
    if op in (Op.GT, Op.GE, Op.LT, Op.LE):
        a, b = _as_number(actual), _as_number(constraint.values[0])
        if a is None or b is None:
            return False
        return {Op.GT: a > b, Op.GE: a >= b, Op.LT: a < b, Op.LE: a <= b}[op]
    text = str(actual).lower()
    if op is Op.IN:
        return text in constraint.values
    a, b = _as_number(actual), _as_number(constraint.values[0])
    equal = (a == b) if (a is not None and b is not None) else text == constraint.values[0]
    return equal if op is Op.EQ else not equal


def device_constraints(resources: Resources) -> tuple[Constraint, ...]:
    """The hard constraints a resource request implies: device type, variant and per-host count."""
    device = resources.device
    if not device.is_accelerator:
        return ()
    out = [Constraint("device-type", Op.EQ, (device.kind,))]
    if device.variant:
        out.append(Constraint("device-variant", Op.EQ, (device.variant,)))
    if device.topology:
        out.append(Constraint("tpu-topology", Op.EQ, (device.topology,)))
    return tuple(out)


def constraint_value(constraints: Iterable[Constraint], key: str) -> str | None:
    """The single EQ value a set of constraints pins `key` to, if any (e.g. a `cluster=` pin)."""
    for c in constraints:
        if c.key == key and c.op is Op.EQ and not c.preferred:
            return c.values[0]
    return None


def inherit_constraints(parent: Iterable[Constraint], child: Iterable[Constraint]) -> tuple[Constraint, ...]:
    """A child's constraints after inheriting its parent's region/zone (DESIGN §3).

    The child keeps its own region/zone when it names one; `region=any` (ANY_REGION) suppresses the
    inheritance of both and is itself dropped.
    """
    child = tuple(child)
    opt_out = any(c.key in ("region", "zone") and ANY_REGION in c.values for c in child)
    kept = tuple(c for c in child if not (c.key in ("region", "zone") and ANY_REGION in c.values))
    if opt_out:
        return kept
    named = {c.key for c in kept}
    inherited = tuple(c for c in parent if c.key in ("region", "zone") and c.key not in named)
    return kept + inherited
