"""`iris cluster status` says why a backend that asks another system for its capacity has no
workers (a Slurm whose configuration its commands cannot read), instead of only `0/0`."""

from __future__ import annotations

import json
import shutil

import pytest


@pytest.mark.skipif(not shutil.which("sinfo"), reason="needs Slurm's client tools (apt-get install slurm-wlm)")
def test_cluster_status_names_why_a_slurm_backend_has_no_workers(controller_factory, tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=broken\n")  # no SlurmctldHost: every Slurm command refuses it at once
    ctl = controller_factory(backends=[{"id": "gpu", "kind": "slurm", "partition": "gpu", "slurm_conf": str(conf)}])
    text = ctl.cli("cluster", "status", check=True).stdout
    line = next((line for line in text.splitlines() if line.startswith("backend gpu: ")), "")
    assert "SlurmctldHost" in line, text
    backends = json.loads(ctl.cli("-o", "json", "rpc", "controller", "list-backends", check=True).stdout)
    assert "SlurmctldHost" in backends["backends"][0]["problem"]
