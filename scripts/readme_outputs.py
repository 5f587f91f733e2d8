"""Reruns the console examples of the README's tour and writes their real output back into it.

Every `$ command` line of the ```console blocks between "## A short tour" and "### Federation"
runs, in order, in one bash session against a throw-away embedded cluster: HOME and the state
directory in a temp folder, `USER=alice`, `.venv/bin` first on PATH, and the working directory a
project folder holding the README's own `driver.py`. The output of each command (stdout and stderr
as a terminal shows them) replaces the lines under it. The cluster listens on a free port so the
run never disturbs a cluster on 10000; paths and the port are written back as the README shows
them (`/home/alice`, 10000). The cluster is stopped at the end, whatever happens.

    .venv/bin/python scripts/readme_outputs.py           # rewrite README.md
    .venv/bin/python scripts/readme_outputs.py --check   # exit 1 if a command's exit code differs
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
START, END = "## A short tour", "### Federation"
BLOCK = re.compile(r"```console\n(.*?)```", re.S)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def driver_source(text: str) -> str:
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        if block.startswith("# driver.py"):
            return block
    raise SystemExit("README has no ```python block starting with '# driver.py'")


class Session:
    """Runs README commands one by one with the tour's environment; maps outputs back."""

    def __init__(self, base: Path):
        self.home = base / "home" / "alice"
        self.project = self.home / "project"
        self.project.mkdir(parents=True)
        self.port = free_port()
        venv_bin = Path(sys.executable).parent
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("IRIS_")},
            "HOME": str(self.home),
            "USER": "alice",
            "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "IRIS_CONTROLLER": f"http://127.0.0.1:{self.port}",
            "COLUMNS": "120",
            "PYTHONUNBUFFERED": "1",  # stdout and stderr interleave as on a terminal
        }

    def command_for(self, line: str) -> str:
        """The command as run here: the embedded cluster on this session's port."""
        return re.sub(r"(iris cluster (?:start|stop|status)[^|;&]*--local)", rf"\1 --port {self.port}", line)

    def run(self, line: str) -> tuple[str, int]:
        proc = subprocess.run(
            ["bash", "-c", "{ " + self.command_for(line) + "\n} 2>&1"],
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        out = proc.stdout.replace(str(self.home), "/home/alice").replace(f":{self.port}", ":10000")
        return out, proc.returncode

    def stop(self) -> None:
        subprocess.run(
            ["bash", "-c", f"iris cluster stop --local --port {self.port}"],
            env=self.env,
            capture_output=True,
            timeout=60,
        )


def regenerate(text: str, session: Session) -> tuple[str, list[str]]:
    start, end = text.index(START), text.index(END)
    section = text[start:end]
    problems: list[str] = []

    def redo(match: re.Match) -> str:
        lines = []
        for line in match.group(1).splitlines():
            if not line.startswith("$ "):
                continue
            command = line[2:]
            output, code = session.run(command)
            print(f"$ {command}  (exit {code})", file=sys.stderr)
            shown_code = re.search(r"echo exit=\$\?", command)
            if code != 0 and not shown_code and 'iris query "DELETE' not in command:
                problems.append(f"{command!r} exited {code}: {output.strip()[-300:]}")
            lines.append(line)
            lines.extend(output.rstrip("\n").splitlines() if output.strip() else [])
        return "```console\n" + "\n".join(lines) + "\n```"

    return text[:start] + BLOCK.sub(redo, section) + text[end:], problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="run the commands but leave README.md as it is")
    args = ap.parse_args(argv)
    text = README.read_text()
    base = Path(tempfile.mkdtemp(prefix="iris-readme-"))
    session = Session(base)
    (session.project / "driver.py").write_text(driver_source(text))
    try:
        updated, problems = regenerate(text, session)
    finally:
        session.stop()
        shutil.rmtree(base, ignore_errors=True)
    for problem in problems:
        print(f"!! {problem}", file=sys.stderr)
    if not args.check:
        README.write_text(updated)
        print(f"rewrote the tour's outputs in {README}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
