"""What follows the first word of a job's command belongs to the command: `iris job run` reads its
own options only before it (a real controller, the command read back from it)."""

from __future__ import annotations

from iris.cli.main import main
from iris.client import IrisClient


def _run(monkeypatch, tmp_path, url: str, argv: list[str]) -> int:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IRIS_CONTROLLER", url)
    monkeypatch.setenv("USER", "alice")
    monkeypatch.delenv("IRIS_JOB_ID", raising=False)
    try:
        main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return 0


def test_job_run_leaves_dash_e_after_the_command_word_to_the_command(controller, monkeypatch, tmp_path):
    tail = {
        "pair": ["python", "x.py", "-e", "FOO", "BAR"],
        "alone": ["python", "x.py", "-e", "FOO"],
        "after-value": ["--cpu", "1", "grep", "-e", "pattern", "file"],
    }
    for name, words in tail.items():
        argv = ["job", "run", "--no-wait", "--no-workspace", "--job-name", f"{name}", "-e", "A", "1", *words]
        assert _run(monkeypatch, tmp_path, controller.url, argv) == 0, name
    with IrisClient(controller.url) as client:
        for name, words in tail.items():
            job = client.describe(f"/alice/{name}").job
            command = words[2:] if words[0] == "--cpu" else words
            assert list(job.command) == command, name
