"""Reruns the console examples of the README and docs/federation.md and writes their real output
back into them.

Two sections are rerun, each in its own throw-away folder, with `.venv/bin` first on PATH and
`USER=alice`:

- the README's tour, between "## A short tour" and "## Federation": every `$ command` line of its
  ```console blocks runs, in order, against an embedded cluster, with HOME and the state
  directory in a temp folder and the working directory a project folder holding the README's own
  `driver.py`;
- docs/federation.md, between "## The demo" and "## Federation in one page": `iris demo`,
  shown abridged (its second step whole, the other steps' first and last lines), then the
  commands by hand, run from a folder (shown as `/tmp/fed`; HOME shown as `/home/alice`) holding
  `marin.yaml` and `cw-h100.yaml` exactly as "Federation in one page" prints them.

The output of each command (stdout and stderr as a terminal shows them) replaces the lines under
it; `export NAME=VALUE` lines set the variable for the commands after them, and a token printed
in full is cut to its first 90 characters. Clusters listen on free
ports so a run never disturbs a cluster on 10000 or 10001; paths and ports are written back as the
README shows them. Every cluster a section started is stopped at its end, whatever happens.

    .venv/bin/python scripts/readme_outputs.py           # rewrite README.md and docs/federation.md
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
FEDERATION_PAGE = ROOT / "docs" / "federation.md"
TOUR = ("## A short tour", "## Federation\n")
FEDERATION = ("## The demo", "## Federation in one page")
BLOCK = re.compile(r"```console\n(.*?)```", re.S)
README_PORTS = (10000, 10001)  # the ports the README's clusters listen on, in order of the configs


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
        self.shown = {str(self.home): "/home/alice"}  # real text -> as the README shows it
        self.ports = {README_PORTS[0]: self.port}
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

    def to_real(self, text: str) -> str:
        for shown, real in self.ports.items():
            text = text.replace(f":{shown}", f":{real}")
        return text

    def to_shown(self, text: str) -> str:
        for real, shown in self.shown.items():
            text = text.replace(real, shown)
        for shown, real in self.ports.items():
            text = text.replace(f":{real}", f":{shown}")
        return text

    def run(self, line: str) -> tuple[str, int]:
        export = re.fullmatch(r"export (\w+)=(\S+)", line.strip())
        if export:
            self.env[export.group(1)] = self.to_real(export.group(2))
            return "", 0
        proc = subprocess.run(
            ["bash", "-c", "{ " + self.to_real(self.command_for(line)) + "\n} 2>&1"],
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return _short_tokens(self.to_shown(proc.stdout)), proc.returncode

    def stop(self) -> None:
        subprocess.run(
            ["bash", "-c", f"iris cluster stop --local --port {self.port}"],
            env=self.env,
            capture_output=True,
            timeout=60,
        )


class FederationSession(Session):
    """The federation section: a folder shown as /tmp/fed with the README's two cluster configs."""

    SHOWN = "/tmp/fed"

    def __init__(self, base: Path, configs: dict[str, str]):
        super().__init__(base)
        self.project = base / "fed"
        self.project.mkdir()
        self.ports = {shown: free_port() for shown in README_PORTS}
        self.shown = {str(self.project): self.SHOWN, str(self.home): "/home/alice"}
        del self.env["IRIS_CONTROLLER"]
        self.configs = list(configs)
        for name, text in configs.items():
            (self.project / name).write_text(self.to_real(text))

    def command_for(self, line: str) -> str:
        return line

    def stop(self) -> None:
        for name in self.configs:
            subprocess.run(
                ["bash", "-c", f"iris cluster stop --config {name}"],
                cwd=self.project,
                env=self.env,
                capture_output=True,
                timeout=60,
            )


def _short_tokens(text: str) -> str:
    """A token printed in full is cut to its first 90 characters and `…`: it is a credential, and long."""
    return re.sub(r"\b(eyJ[\w.-]{87})[\w.-]+", r"\1…", text)


def federation_configs(text: str) -> dict[str, str]:
    """The ```yaml blocks of "Federation in one page" that start `# NAME.yaml`, by file name."""
    page = text[text.index(FEDERATION[1]) :]
    configs = {}
    for block in re.findall(r"```yaml\n(.*?)```", page, re.S):
        first = block.split("\n", 1)[0]
        if first.startswith("# ") and first.split()[1].endswith(".yaml"):
            configs[first.split()[1]] = block
    if not configs:
        raise SystemExit(
            "docs/federation.md's 'Federation in one page' has no ```yaml block starting with '# NAME.yaml'"
        )
    return configs


def abridge_demo(output: str) -> str:
    """`iris demo`'s output as the README shows it: the set-up's first lines and the peers it
    reaches, the first federated step whole, and of every other step its first and last lines."""
    sections = re.split(r"\n(?=== )", output.rstrip("\n"))
    out = []
    for i, section in enumerate(sections):
        lines = section.split("\n")
        if i == 0:
            reach = [ln for ln in lines if " reaches " in ln]
            keep = lines[:4] + (["   …"] if len(lines) > 4 + len(reach) else []) + reach
        elif lines[0].startswith("== 2.") or len(lines) <= 4:
            keep = lines
        else:
            tail = 1 if i == len(sections) - 1 else 2
            keep = lines[:3] + ["   …"] + lines[-tail:] if len(lines) > 3 + tail else lines
        out.append("\n".join(keep))
    return "\n\n".join(o.strip("\n") for o in out) + "\n"


def regenerate(text: str, bounds: tuple[str, str], session: Session) -> tuple[str, list[str]]:
    start, end = text.index(bounds[0]), text.index(bounds[1], text.index(bounds[0]) + 1)
    section = text[start:end]
    problems: list[str] = []

    def redo(match: re.Match) -> str:
        lines = []
        for line in match.group(1).splitlines():
            if not line.startswith("$ "):
                continue
            command = line[2:]
            output, code = session.run(command)
            if command.strip() == "iris demo":
                output = abridge_demo(output)
            print(f"$ {command}  (exit {code})", file=sys.stderr)
            shown_code = re.search(r"echo exit=\$\?", command)
            if code != 0 and not shown_code and 'iris query "DELETE' not in command:
                problems.append(f"{command!r} exited {code}: {output.strip()[-300:]}")
            lines.append(line)
            lines.extend(output.rstrip("\n").splitlines() if output.strip() else [])
        return "```console\n" + "\n".join(lines) + "\n```"

    return text[:start] + BLOCK.sub(redo, section) + text[end:], problems


def run_section(text: str, bounds: tuple[str, str], make_session) -> tuple[str, list[str]]:
    """Reruns one section's commands in a fresh temp folder; stops what they started, whatever happens."""
    base = Path(tempfile.mkdtemp(prefix="iris-readme-"))
    base.chmod(0o755)  # run as root, a cluster runs tasks under other uids: they must reach the project
    session = make_session(base)
    try:
        return regenerate(text, bounds, session)
    finally:
        session.stop()
        shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="run the commands but leave the pages as they are")
    ap.add_argument("--only", choices=["tour", "federation"], help="rerun one section (default: both)")
    args = ap.parse_args(argv)
    readme = README.read_text()

    def tour(base: Path) -> Session:
        session = Session(base)
        (session.project / "driver.py").write_text(driver_source(readme))
        return session

    def federation(base: Path) -> Session:
        return FederationSession(base, federation_configs(FEDERATION_PAGE.read_text()))

    sections = {"tour": (README, TOUR, tour), "federation": (FEDERATION_PAGE, FEDERATION, federation)}
    problems: list[str] = []
    for name, (page, bounds, make_session) in sections.items():
        if args.only not in (None, name):
            continue
        text, found = run_section(page.read_text(), bounds, make_session)
        problems += found
        if not args.check:
            page.write_text(text)
            print(f"rewrote the console outputs in {page}", file=sys.stderr)
    for problem in problems:
        print(f"!! {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
