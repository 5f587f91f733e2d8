"""What a worker daemon advertises and where it keeps its files, with defaults sized to the host.

Parsing lives here rather than in the CLI so the daemon, the tests and the benchmark build the
same frozen settings from the same strings (`--devices gpu:h100:8`, `--attr zone=us-east5-a`).
"""

from __future__ import annotations

import os
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path

from iris.core.errors import InvalidArgument
from iris.core.names import validate_worker_name
from iris.core.resources import Device, Resources
from iris.core.units import parse_size
from iris.rpc.transport import ClientTls

RUNTIMES = ("process", "docker")


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    controller: str
    backend: str
    name: str
    capacity: Resources
    attributes: dict[str, str] = field(default_factory=dict)
    work_dir: Path = Path("~/.iris/worker").expanduser()
    runtime: str = "process"
    token: str | None = None
    docker_host: str | None = None  # the Docker daemon's socket (--runtime docker); None: $DOCKER_HOST
    device_ids: tuple[str, ...] = ()  # the found GPUs' UUIDs by index (`iris.backends.gpus`); () with --devices
    tls: ClientTls = ClientTls()  # how an https controller's certificate is checked (--ca, $IRIS_CA)


def parse_devices(text: str) -> Device:
    """`gpu:h100:8` (kind:variant:count), `gpu:8` (any variant) or `tpu:v5p:8`."""
    parts = text.strip().lower().split(":")
    try:
        if len(parts) in (2, 3) and parts[0] in ("gpu", "tpu") and int(parts[-1]) > 0:
            return Device(parts[0], parts[1] if len(parts) == 3 else "", int(parts[-1]))
    except ValueError:
        pass
    raise InvalidArgument(
        f"--devices {text!r} is not understood; use KIND:VARIANT:COUNT with a count of 1 or more, e.g. gpu:h100:8"
    )


def parse_attributes(items: tuple[str, ...] | list[str]) -> dict[str, str]:
    attrs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidArgument(f"--attr {item!r} is not KEY=VALUE, e.g. --attr zone=us-east5-a")
        attrs[key.strip().lower()] = value.strip().lower()
    return attrs


def device_attributes(device: Device) -> dict[str, str]:
    """The attributes a worker's devices imply (device-type, device-variant, gpu-count)."""
    if not device.is_accelerator:
        return {"device-type": "cpu"}
    attrs = {"device-type": device.kind, "device-variant": device.variant}
    if device.kind == "gpu":
        attrs["gpu-count"] = str(device.count)
    else:
        attrs["tpu-topology"] = f"{device.variant}-{device.count}"
    return attrs


def host_settings(
    controller: str,
    backend: str,
    name: str | None = None,
    cpu: float | None = None,
    memory: str | None = None,
    disk: str | None = None,
    devices: str | None = None,
    attrs: tuple[str, ...] = (),
    work_dir: str | None = None,
    runtime: str = "process",
    token: str | None = None,
) -> WorkerSettings:
    """Settings from command-line strings; what is not given is measured on this host."""
    import psutil

    if runtime not in RUNTIMES:
        raise InvalidArgument(f"--runtime {runtime!r} is not known; use one of: {', '.join(RUNTIMES)}")
    if name is not None and not name.strip():
        raise InvalidArgument("--name is empty; give the worker a name, or leave --name out for the host name")
    if work_dir is not None and not work_dir.strip():
        raise InvalidArgument("--work-dir is empty; give a folder, or leave --work-dir out for ~/.iris/worker/NAME")
    name = validate_worker_name(name or socket.gethostname().split(".")[0])
    # Absolute, so that attempts, which run in folders of their own, still find the worker's files.
    folder = (Path(work_dir).expanduser() if work_dir else Path("~/.iris/worker").expanduser() / name).resolve()
    device_ids: tuple[str, ...] = ()
    if devices:
        device = parse_devices(devices)
    else:  # what the host has, found through NVML: --devices states it instead
        from iris.backends import gpus

        found = gpus.usable(gpus.detect())
        device, device_ids = gpus.as_device(found), tuple(g.uuid for g in found)
    implied = device_attributes(device)
    given = parse_attributes(attrs)
    for key, value in given.items():
        if key in implied and value != implied[key]:
            raise InvalidArgument(
                f"--attr {key}={value} contradicts --devices {devices or '(none: a cpu worker)'}, which makes "
                f"{key}={implied[key]}; drop the --attr and say the device with --devices, e.g. gpu:h100:8"
            )
    attributes = {**implied, **given}
    if os.geteuid() == 0:
        unsafe_for_root(folder)  # before anything is made: what exists on the way
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidArgument(
            f"--work-dir {folder} cannot be created: {exc.strerror}; give a folder this user may create and"
            " write, or leave --work-dir out for ~/.iris/worker/NAME"
        ) from None
    if os.geteuid() == 0:
        unsafe_for_root(folder)  # and what was made (a umask of 0 would leave it open)
    capacity = Resources(
        cpu=float(cpu) if cpu else float(os.cpu_count() or 1),
        memory=parse_size(memory) if memory else int(psutil.virtual_memory().total),
        disk=parse_size(disk) if disk else int(psutil.disk_usage(str(folder)).free),
        device=device,
    )
    if capacity.cpu <= 0:
        raise InvalidArgument(f"--cpu {cpu} must be more than zero")
    return WorkerSettings(
        controller.rstrip("/"), backend, name, capacity, attributes, folder, runtime, token, device_ids=device_ids
    )


def unsafe_for_root(folder: Path) -> None:
    """Refuses a root daemon's work dir that another user could change: the daemon writes its pid,
    boot id and attempts' files there as root, so a folder on the way that another uid owns or may
    write (other than a sticky one such as /tmp, whose entries only their owners may replace) would
    let that user swap a part of it for a link to anywhere. As OpenSSH's StrictModes does."""
    path = Path("/")
    parts = folder.parts[1:]
    for depth in range(len(parts) + 1):
        if depth:
            path = path / parts[depth - 1]
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return  # the rest is made by this root process
        if not stat.S_ISDIR(st.st_mode):
            return  # not a folder: making the work dir fails, and says so
        loose = st.st_mode & 0o022
        sticky = st.st_mode & stat.S_ISVTX and depth < len(parts)
        if st.st_uid != 0 or (loose and not sticky):
            why = (
                f"belongs to uid {st.st_uid}"
                if st.st_uid != 0
                else f"is writable by others (mode {st.st_mode & 0o7777:o})"
            )
            raise InvalidArgument(
                f"--work-dir {folder}: {path} {why}; a root daemon's work dir and every folder above it must"
                " be root's and writable only by root (a sticky folder such as /tmp aside), or another user"
                " could replace a part of it with a link. Pick such a folder, e.g. /var/lib/iris/worker"
            )
