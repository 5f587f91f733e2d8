"""Converts between API messages and core types, in one place for the server and the SDK."""

from __future__ import annotations

from collections.abc import Iterable

from iris.core.constraints import Constraint, make_constraint
from iris.core.resources import Device, Resources
from iris.rpc import controller_pb2 as pb


def resources_to_proto(r: Resources) -> pb.Resources:
    return pb.Resources(
        cpu=r.cpu,
        memory_bytes=r.memory,
        disk_bytes=r.disk,
        device=pb.Device(
            kind=r.device.kind, variant=r.device.variant, count=r.device.count, topology=r.device.topology
        ),
    )


def resources_from_proto(m: pb.Resources, *, default_cpu: float = 1.0, default_memory: int = 1024**3) -> Resources:
    """Reads a request's resources; unset cpu/memory fall back to the defaults (1 core, 1G)."""
    device = Device()
    if m.HasField("device") and m.device.kind and m.device.kind != "cpu":
        device = Device(m.device.kind, m.device.variant.lower(), m.device.count, m.device.topology.lower())
    return Resources(
        cpu=m.cpu if m.cpu > 0 else default_cpu,
        memory=m.memory_bytes if m.memory_bytes > 0 else default_memory,
        disk=max(0, m.disk_bytes),
        device=device,
    )


def constraint_to_proto(c: Constraint) -> pb.Constraint:
    return pb.Constraint(key=c.key, op=c.op.value, values=list(c.values), preferred=c.preferred)


def constraints_from_proto(items: Iterable[pb.Constraint]) -> tuple[Constraint, ...]:
    return tuple(make_constraint(c.key, c.op, c.values, c.preferred) for c in items)


def fill_availability(msg: pb.Availability, avail) -> None:
    """Copies a core Availability into an (empty) Availability message."""
    msg.version, msg.observation_epoch_ms = avail.version, avail.observation_epoch_ms
    msg.amounts.update(avail.amounts)
    msg.total_amounts.update(avail.total_amounts)
    for h in avail.held_by_band:
        msg.held_by_band.add(band=h.band.label, amounts=dict(h.amounts))
