"""Finds the GPUs of the host a worker (or the local backend) runs on: how many, which model, their
memory and UUIDs, and the MIG instances a GPU is split into.

Read through NVML with NVIDIA's own bindings (`pynvml`, the `nvidia-ml-py` package), which load the
driver's `libnvidia-ml.so.1`; where that library is missing or answers nothing, `nvidia-smi`'s CSV
query is the fallback, and a host with neither has no GPUs. A GPU in MIG mode is offered as its
instances, each a device of its own (`CUDA_VISIBLE_DEVICES` takes a MIG instance's UUID as it
takes a GPU's). What an operator states (`--devices`, a backend's `devices:`) always wins over what
is found here.

A model name becomes the variant the scheduler matches (`--gpu H100`): "NVIDIA H100 80GB HBM3" is
`h100`, "NVIDIA A100-SXM4-40GB" is `a100`, "NVIDIA GeForce RTX 4090" is `rtx4090`.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from iris.core.resources import Device

log = logging.getLogger(__name__)

_VENDOR_WORDS = {"nvidia", "tesla", "geforce", "quadro"}


@dataclass(frozen=True, slots=True)
class Gpu:
    """One device a task may be given: a whole GPU, or one MIG instance of a GPU."""

    index: int  # the position among this host's devices, as the worker hands them out
    uuid: str  # what CUDA_VISIBLE_DEVICES names it by (`GPU-…`, or `MIG-…` for an instance)
    model: str  # as the driver names it, e.g. "NVIDIA H100 80GB HBM3"
    memory_bytes: int
    mig: bool = False


def variant_of(model: str) -> str:
    """The scheduler's variant for a driver's model name: its first word past the vendor's, lowercased."""
    words = [w for w in re.split(r"[\s]+", model.strip()) if w]
    words = [w for w in words if w.lower() not in _VENDOR_WORDS] or words
    if not words:
        return ""
    first = words[0].split("-")[0].lower()
    # "RTX 4090", "RTX A6000": the family word alone says too little.
    if first in ("rtx", "gtx", "titan") and len(words) > 1:
        first += words[1].split("-")[0].lower()
    return re.sub(r"[^a-z0-9.]", "", first)


def as_device(gpus: Sequence[Gpu]) -> Device:
    """The one device kind a worker advertises for `gpus`; a host of mixed models advertises its
    most common model's, counting only those (the scheduler knows one variant per worker)."""
    if not gpus:
        return Device()
    variants = Counter(variant_of(g.model) for g in gpus)
    variant, count = variants.most_common(1)[0]
    if len(variants) > 1:
        log.warning("this host has GPUs of several models (%s); offering the %d %s", dict(variants), count, variant)
    return Device("gpu", variant, count)


def usable(gpus: Sequence[Gpu]) -> tuple[Gpu, ...]:
    """The GPUs `as_device` offers, in index order: those of the most common model."""
    if not gpus:
        return ()
    variant = Counter(variant_of(g.model) for g in gpus).most_common(1)[0][0]
    return tuple(g for g in gpus if variant_of(g.model) == variant)


def detect() -> tuple[Gpu, ...]:
    """This host's GPUs (MIG instances in place of a GPU in MIG mode); () when it has none."""
    found = _from_nvml()
    if found is None:
        found = _from_nvidia_smi()
    return found or ()


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _from_nvml() -> tuple[Gpu, ...] | None:
    """What NVML reports, or None when NVML cannot be loaded or initialised."""
    try:
        import pynvml  # type: ignore[import-untyped]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        log.debug("NVML is not available here: %s", exc)
        return None
    try:
        out: list[Gpu] = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            model = _text(pynvml.nvmlDeviceGetName(handle))
            instances = _mig_instances(pynvml, handle)
            if instances:
                for uuid, memory in instances:
                    out.append(Gpu(len(out), uuid, model, memory, mig=True))
                continue
            memory = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
            out.append(Gpu(len(out), _text(pynvml.nvmlDeviceGetUUID(handle)), model, memory))
        return tuple(out)
    except pynvml.NVMLError as exc:
        log.warning("NVML failed while listing GPUs (%s); trying nvidia-smi", exc)
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _mig_instances(pynvml, handle) -> list[tuple[str, int]]:
    """(uuid, memory) of each MIG instance of a GPU in MIG mode; [] otherwise."""
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except pynvml.NVMLError:  # not MIG-capable
        return []
    if current != pynvml.NVML_DEVICE_MIG_ENABLE:
        return []
    instances = []
    for j in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, j)
        except pynvml.NVMLError:  # an empty slot
            continue
        instances.append((_text(pynvml.nvmlDeviceGetUUID(mig)), int(pynvml.nvmlDeviceGetMemoryInfo(mig).total)))
    return instances


def _from_nvidia_smi() -> tuple[Gpu, ...] | None:
    """What `nvidia-smi --query-gpu` prints (whole GPUs only), or None without a working nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run(
            [smi, "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            env={"PATH": "/usr/bin:/bin"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("nvidia-smi did not answer: %s", exc)
        return None
    if done.returncode != 0:
        log.warning("nvidia-smi failed (exit %d): %s", done.returncode, done.stderr.strip()[:200])
        return None
    out: list[Gpu] = []
    for line in done.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4 or not parts[0].isdigit():
            continue
        try:
            memory = int(float(parts[3]) * 1024**2)  # MiB
        except ValueError:
            memory = 0
        out.append(Gpu(len(out), parts[1], parts[2], memory))
    return tuple(out)
