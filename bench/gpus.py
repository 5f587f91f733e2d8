"""The GPU check on a real GPU host: what NVML reports, and that tasks see only what they were given.

Run it on a host with NVIDIA GPUs and their driver; elsewhere it says there are none and exits 0.
A real controller (`python -m iris.controller`) with one local backend of one worker offers the
host's GPUs as NVML finds them (no `devices:` in its config, as tests/workers/test_workers_gpus.py
does with a fake NVML). Then, each printed beside what it should be:

  - what NVML found: count, model → variant, memory, UUIDs (MIG instances included);
  - the backend's advertised device and count;
  - a job asking for one GPU: its CUDA_VISIBLE_DEVICES is exactly one UUID NVML reported, and
    `nvidia-smi -L` inside the task lists one device;
  - a CPU-only job: CUDA_VISIBLE_DEVICES is set and empty;
  - the time from submit to SUCCEEDED of each, beside a bare `python -c pass`.

    .venv/bin/python bench/gpus.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import PYTHON, Controller  # noqa: E402

from iris.backends import gpus  # noqa: E402
from iris.client import IrisClient  # noqa: E402

TERMINAL = {"SUCCEEDED", "FAILED", "KILLED", "UNSCHEDULABLE"}
PROBE = (
    'echo "visible=$CUDA_VISIBLE_DEVICES"; command -v nvidia-smi >/dev/null && nvidia-smi -L | grep -c "^GPU" || true'
)


def run(client: IrisClient, name: str, **resources) -> tuple[list[str], float]:
    began = time.perf_counter()
    job = client.submit(["sh", "-c", PROBE], name=name, user="bench", **resources)
    deadline = time.monotonic() + 120
    while (status := client.status(job)).state not in TERMINAL:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{job} did not finish within 120 s ({status.state}: {status.pending_reason})")
        time.sleep(0.05)
    took = time.perf_counter() - began
    if status.state != "SUCCEEDED":
        raise RuntimeError(f"{job} ended {status.state}: {status.error}")
    return [line.text for line in client.logs(job)], took


def main() -> int:
    found = gpus.usable(gpus.detect())
    if not found:
        print("no GPU found through NVML (or nvidia-smi) on this host: nothing to check here")
        return 0
    started = time.perf_counter()
    subprocess.run([PYTHON, "-c", "pass"], check=True)
    bare_ms = (time.perf_counter() - started) * 1000
    device = gpus.as_device(found)
    print(f"NVML: {len(found)} device(s), variant {device.variant}")
    for g in found:
        print(f"  [{g.index}] {g.uuid}  {g.model}  {g.memory_bytes / 2**30:.1f} GiB{'  (MIG)' if g.mig else ''}")
    base = Path(tempfile.mkdtemp(prefix="iris-bench-gpus-"))
    backend = {"id": "gpu", "kind": "local", "workers": 1}
    ctl = Controller("gpus", base, [backend], extra={"auth": {"task_uids": {"enabled": False}}}).start()
    try:
        with IrisClient(ctl.url) as client:
            (info,) = [b for b in client.backends().backends if b.id == "gpu"]
            offered = info.worker_capacity.device
            print(f"backend gpu offers {offered.count} × {offered.kind}:{offered.variant} (expected {len(found)})")
            lines, took = run(client, "one-gpu", gpu=f"{device.variant}x1")
            visible = lines[0].removeprefix("visible=")
            ok = visible in {g.uuid for g in found} and lines[1:] in ([], ["1"])
            print(
                f"1-GPU job: CUDA_VISIBLE_DEVICES={visible}, nvidia-smi -L lists {lines[1:] or ['?']}: "
                f"{'as expected' if ok else 'NOT as expected'}; submit → SUCCEEDED {took * 1000:.0f} ms"
            )
            lines, took = run(client, "cpu-only", cpu=1)
            empty = lines[0] == "visible="
            print(
                f"CPU job: {lines[0]!r}: {'empty, as expected' if empty else 'NOT empty'}; "
                f"submit → SUCCEEDED {took * 1000:.0f} ms"
            )
    finally:
        ctl.stop()
    print(f"a bare `python -c pass` takes {bare_ms:.1f} ms here")
    return 0


if __name__ == "__main__":
    sys.exit(main())
