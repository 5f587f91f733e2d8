"""A mistyped key or kind is refused naming the bad word and the known one it most likely meant."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CASES = [
    (
        "name: x\nbackends: [{id: cpu, kind: local}]\ncontroller: {tick_intervl: 2s}\n",
        "controller.tick_intervl: is not a known key; did you mean 'tick_interval'?",
    ),
    (
        "name: x\nbackends: [{id: cpu, kind: local, workres: 2}]\n",
        "backends.0.workres: is not a known key; did you mean 'workers'?",
    ),
    (
        "name: x\nbackends: [{id: s, kind: slurm, partition: p, partiton: q}]\n",
        "backends.0.partiton: is not a known key; did you mean 'partition'?",
    ),
    ("name: x\nbackends: [{id: cpu, kind: lokal}]\n", "'lokal' is not a backend kind; did you mean 'local'?"),
    ("name: x\nbackend: [{id: cpu, kind: local}]\n", "backend: is not a known key; did you mean 'backends'?"),
    ("name: x\nbackends: [{id: cpu, kind: local}]\nzzzz: 1\n", "zzzz: is not a known key\n"),
]


def _iris(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "iris.cli.main", *args], env=dict(os.environ), capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(("text", "message"), CASES)
def test_cluster_start_with_a_mistyped_key_names_the_key_it_meant(tmp_path, text, message):
    config = tmp_path / "cluster.yaml"
    config.write_text(text)
    result = _iris("cluster", "start", "--config", str(config))
    assert result.returncode == 3 and message in result.stderr, result.stderr
    assert not (tmp_path / "state").exists()


def test_job_run_with_a_mistyped_constraint_key_names_the_key_it_meant(module_controller):
    result = module_controller.cli("job", "run", "--constraint", "regoin=us-east5", "--", "true")
    assert result.returncode == 3 and "'regoin' is not known; did you mean 'region'?" in result.stderr, result.stderr
    assert module_controller.cli("-o", "json", "job", "list").stdout.count("job_id") == 0
