"""Resource requests and worker capacities: cpu, memory, disk and one device kind.

`--gpu H100x8` is variant h100 × 8, `--gpu 8` any variant × 8, `--gpu H100` one h100;
`--tpu v5p-8` is variant v5p with topology v5p-8 (8 chips). A device's *token* (its lower-cased
variant, e.g. `h100`) is the unit in which backends advertise availability.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from iris.core.errors import InvalidArgument
from iris.core.limits import MAX_TASK_BYTES, MAX_TASK_CPU, MAX_TASK_DEVICES
from iris.core.units import format_size, parse_size

DEVICE_KINDS = ("cpu", "gpu", "tpu")


@dataclass(frozen=True, slots=True)
class Device:
    """A device request (or a worker's devices): kind, variant (lower-case, '' = any), count."""

    kind: str = "cpu"
    variant: str = ""
    count: int = 0
    topology: str = ""

    def __post_init__(self) -> None:
        if self.kind not in DEVICE_KINDS:
            raise InvalidArgument(f"device kind {self.kind!r} is not one of {', '.join(DEVICE_KINDS)}")
        if self.count < 0:
            raise InvalidArgument(f"device count {self.count} is negative")

    @property
    def is_accelerator(self) -> bool:
        return self.kind != "cpu" and self.count > 0

    @property
    def token(self) -> str:
        """The availability token this request draws from ('' when any variant will do)."""
        return self.variant.lower()

    def describe(self) -> str:
        if not self.is_accelerator:
            return "cpu"
        name = self.topology or (self.variant or f"any {self.kind}")
        return f"{name}x{self.count}" if not self.topology else name


_GPU_RE = re.compile(r"^(?:([A-Za-z][A-Za-z0-9_.-]*?)(?:x([0-9]+))?|([0-9]+))$")
_TPU_RE = re.compile(r"^([A-Za-z][A-Za-z0-9]*?)-([0-9]+)$")


def parse_gpu(value: str) -> Device:
    """Parses `H100x8`, `8` (any variant) or `H100` (one)."""
    text = value.strip()
    lowered = text.lower()
    if re.fullmatch(r"x[0-9]+", lowered):
        raise InvalidArgument(
            f"--gpu {value!r} has a count but no variant; write {text[1:]} (any variant) or e.g. H100x{text[1:]}"
        )
    if re.search(r"x[-+]?[0-9.]*$", lowered) and not re.search(r"[a-z0-9]x[0-9]+$", lowered) and "x" in lowered[1:]:
        raise InvalidArgument(f"--gpu {value!r}: the count after 'x' must be a whole number of at least 1, e.g. H100x8")
    match = _GPU_RE.match(text)
    if not match:
        raise InvalidArgument(
            f"--gpu {value!r} is not understood; use VARIANTxCOUNT (H100x8), COUNT (8) or VARIANT (H100)"
        )
    variant, count, bare_count = match.groups()
    if bare_count is not None:
        n = int(bare_count)
        variant = ""
    else:
        n = int(count) if count is not None else 1
    if n <= 0:
        raise InvalidArgument(f"--gpu {value!r} asks for {n} devices; ask for at least one")
    return Device(kind="gpu", variant=(variant or "").lower(), count=n)


def parse_tpu(value: str) -> Device:
    """Parses a TPU slice name such as `v5p-8` into variant v5p, topology v5p-8, 8 chips."""
    match = _TPU_RE.match(value.strip())
    if not match or int(match.group(2)) <= 0:
        raise InvalidArgument(f"--tpu {value!r} is not understood; use a slice name such as v5p-8 or v6e-16")
    return Device(kind="tpu", variant=match.group(1).lower(), count=int(match.group(2)), topology=value.strip().lower())


@dataclass(frozen=True, slots=True)
class Resources:
    """What one task needs (or one worker offers): cores, bytes of memory and disk, devices."""

    cpu: float = 1.0
    memory: int = 1024**3
    disk: int = 0
    device: Device = field(default_factory=Device)

    def __post_init__(self) -> None:
        if self.cpu < 0:
            raise InvalidArgument(f"cpu {self.cpu} is negative")
        if self.memory < 0 or self.disk < 0:
            raise InvalidArgument("memory and disk must not be negative")

    def describe(self) -> str:
        parts = [f"cpu={self.cpu:g}", f"memory={format_size(self.memory)}"]
        if self.disk:
            parts.append(f"disk={format_size(self.disk)}")
        if self.device.is_accelerator:
            parts.append(f"{self.device.kind}={self.device.describe()}")
        return " ".join(parts)


def check_cpu(cpu: float | str) -> float:
    """The cores one task asks for: a finite number above 0 and at most MAX_TASK_CPU."""
    cores = float(cpu)
    if not math.isfinite(cores):
        raise InvalidArgument(f"cpu {cpu} is not a finite number; ask for cores like 2 or 0.5")
    if cores < 0:
        raise InvalidArgument(f"cpu {cores:g} is negative; ask for cores like 2 or 0.5 (the default is 1)")
    if cores == 0:
        raise InvalidArgument("cpu 0 asks for no cores; ask for a fraction instead, e.g. 0.1 (the default is 1)")
    if cores > MAX_TASK_CPU:
        raise InvalidArgument(f"cpu {cores:g} is more than a task may ask for (at most {MAX_TASK_CPU:g} cores)")
    return cores


def check_task_device(device: Device) -> Device:
    """`device` when one task may ask for that many (at most MAX_TASK_DEVICES)."""
    if device.count > MAX_TASK_DEVICES:
        raise InvalidArgument(
            f"{device.count} {device.kind.upper()}s is more than a task may ask for (at most {MAX_TASK_DEVICES})"
        )
    return device


def task_gpu(value: str) -> Device:
    """--gpu of a job: parsed, and at most what one task may ask for."""
    return check_task_device(parse_gpu(value))


def task_tpu(value: str) -> Device:
    """--tpu of a job: parsed, and at most what one task may ask for."""
    return check_task_device(parse_tpu(value))


def task_bytes(what: str, value: str | int) -> int:
    """A task's memory or disk in bytes, at most MAX_TASK_BYTES."""
    amount = parse_size(value)
    if amount > MAX_TASK_BYTES:
        raise InvalidArgument(
            f"{what} {format_size(amount)} is more than a task may ask for (at most {format_size(MAX_TASK_BYTES)})"
        )
    return amount


def build_resources(
    cpu: float | None = None,
    memory: str | int | None = None,
    disk: str | int | None = None,
    gpu: str | None = None,
    tpu: str | None = None,
) -> Resources:
    """Builds a request from CLI-style values, applying defaults (1 core, 1G memory, no disk)."""
    if gpu and tpu:
        raise InvalidArgument("ask for --gpu or --tpu, not both")
    device = task_gpu(gpu) if gpu else task_tpu(tpu) if tpu else Device()
    if cpu is not None:
        check_cpu(cpu)
    return Resources(
        cpu=1.0 if cpu is None else float(cpu),
        memory=1024**3 if memory is None else task_bytes("memory", memory),
        disk=0 if disk is None else task_bytes("disk", disk),
        device=device,
    )
