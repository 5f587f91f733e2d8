"""GPUs found through NVML: a fake `libnvidia-ml.so.1`, built here, stands in for the driver, and a
real worker daemon (and a real controller's local backend) read it through NVIDIA's bindings."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from iris.client import IrisClient

# Two H100s; the second in MIG mode with two instances. Handles are small integers.
FAKE_NVML = r"""
#include <string.h>
#include <stdio.h>
typedef struct { unsigned long long total, free, used; } mem_t;
static int mig(void *h) { return (long)h == 2; }
int nvmlInitWithFlags(unsigned flags) { return 0; }
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int r) { return "fake NVML error"; }
int nvmlDeviceGetCount_v2(unsigned *n) { *n = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h) { if (i > 1) return 2; *h = (void *)(long)(i + 1); return 0; }
int nvmlDeviceGetName(void *h, char *buf, unsigned len) { snprintf(buf, len, "NVIDIA H100 80GB HBM3"); return 0; }
int nvmlDeviceGetUUID(void *h, char *buf, unsigned len) {
    long v = (long)h;
    if (v >= 100) snprintf(buf, len, "MIG-fake-%ld", v - 100); else snprintf(buf, len, "GPU-fake-%ld", v - 1);
    return 0;
}
int nvmlDeviceGetMemoryInfo(void *h, mem_t *m) {
    m->total = (long)h >= 100 ? 10ULL << 30 : 80ULL << 30; m->free = m->total; m->used = 0; return 0;
}
int nvmlDeviceGetMigMode(void *h, unsigned *cur, unsigned *pend) { *cur = *pend = mig(h); return 0; }
int nvmlDeviceGetMaxMigDeviceCount(void *h, unsigned *n) { *n = mig(h) ? 7 : 0; return 0; }
int nvmlDeviceGetMigDeviceHandleByIndex(void *h, unsigned j, void **m) {
    if (!mig(h) || j > 1) return 6; /* NVML_ERROR_NOT_FOUND: an empty slot */
    *m = (void *)(long)(100 + j); return 0;
}
"""


@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: the fake NVML library cannot be built")
    folder = tmp_path_factory.mktemp("nvml")
    (folder / "nvml.c").write_text(FAKE_NVML)
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(folder / "libnvidia-ml.so.1"), str(folder / "nvml.c")], check=True
    )
    return {"LD_LIBRARY_PATH": str(folder)}


def test_detect_reads_gpus_and_mig_instances_through_nvml(fake_nvml):
    probe = (
        "from iris.backends import gpus; print([(g.uuid, g.model, g.memory_bytes >> 30, g.mig) for g in gpus.detect()])"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env={**fake_nvml, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == str(
        [
            ("GPU-fake-0", "NVIDIA H100 80GB HBM3", 80, False),
            ("MIG-fake-0", "NVIDIA H100 80GB HBM3", 10, True),
            ("MIG-fake-1", "NVIDIA H100 80GB HBM3", 10, True),
        ]
    )


def test_without_nvml_a_host_has_no_gpus():
    probe = "from iris.backends import gpus; print(gpus.detect())"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/nonexistent"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "()"


def test_model_names_become_variants():
    from iris.backends.gpus import variant_of

    assert variant_of("NVIDIA H100 80GB HBM3") == "h100"
    assert variant_of("NVIDIA A100-SXM4-40GB") == "a100"
    assert variant_of("Tesla V100-PCIE-16GB") == "v100"
    assert variant_of("NVIDIA GeForce RTX 4090") == "rtx4090"
    assert variant_of("NVIDIA L4") == "l4"


def test_a_worker_offers_the_gpus_it_finds_and_tasks_see_only_theirs(pool, worker_factory, fake_nvml):
    worker_factory(pool, "gpu-host", env=fake_nvml)
    with IrisClient(pool.url, token="") as sdk:
        (worker,) = [w for w in sdk.workers() if w.worker_id == "gpu-host"]
        assert (worker.capacity.device.kind, worker.capacity.device.variant, worker.capacity.device.count) == (
            "gpu",
            "h100",
            3,
        )
        gpu = sdk.submit(
            ["sh", "-c", 'echo "[$CUDA_VISIBLE_DEVICES]"'], name="two", user="alice", cpu=0.5, gpu="H100x2"
        )
        cpu = sdk.submit(["sh", "-c", 'echo "[$CUDA_VISIBLE_DEVICES]"'], name="none", user="alice", cpu=0.5)
        assert sdk.wait(gpu, timeout=60).state == "SUCCEEDED"
        assert sdk.wait(cpu, timeout=60).state == "SUCCEEDED"
        assert [line.text for line in sdk.logs(gpu)] == ["[GPU-fake-0,MIG-fake-0]"]
        assert [line.text for line in sdk.logs(cpu)] == ["[]"]


def test_devices_given_on_the_command_line_win_over_what_is_found(pool, worker_factory, fake_nvml):
    worker_factory(pool, "stated", "--devices", "gpu:a100:1", env=fake_nvml)
    shown = pool.cli("-o", "json", "worker", "list")
    (worker,) = [w for w in json.loads(shown.stdout)["workers"] if w["worker_id"] == "stated"]
    device = worker["capacity"]["device"]
    assert (device["kind"], device["variant"], device["count"]) == ("gpu", "a100", 1)


def test_a_local_backend_of_one_worker_offers_the_hosts_gpus(controller_factory, fake_nvml):
    ctl = controller_factory(
        "gpus",
        start=False,
        backends=[{"id": "here", "kind": "local", "workers": 1, "capacity": {"cpu": 2, "memory": "2G"}}],
    )
    ctl.env = {**os.environ, **fake_nvml}
    ctl.start()
    with IrisClient(ctl.url, token="") as sdk:
        job = sdk.submit(
            ["sh", "-c", 'echo "[$CUDA_VISIBLE_DEVICES]"'], name="mig", user="alice", cpu=0.5, gpu="H100x1"
        )
        assert sdk.wait(job, timeout=60).state == "SUCCEEDED"
        assert [line.text for line in sdk.logs(job)] == ["[GPU-fake-0]"]
