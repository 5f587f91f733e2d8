"""Decides which files of a directory travel with a job as its workspace, and packs them into a bundle.

`iris job run` ships the current directory by default, so the job runs the submitter's code. What
git would ignore stays home: `.gitignore` files (at any depth, with git's precedence: a deeper file
and a later line win) and `.irisignore` files written the same way, plus `.git` itself. Matching
is delegated to `pathspec`'s gitignore semantics rather than hand-written globbing. Credentials
never travel, whatever the ignore files say: a cluster's state directory (a folder holding
`controller.lock`: its database and signing key), a worker daemon's folder (holding `worker.lock`: other
jobs' workspaces) and an `.iris` folder (saved tokens) stay home.

The bundle is a zip whose bytes depend only on the files' names, contents and executable bits
(sorted entries, fixed timestamps), so the same tree always has the same content id and a
cluster that holds it already is sent nothing. A workspace past the size limit is refused before
anything is read into memory, naming the biggest files, because the usual cause is one data file
or checkpoint that belongs in .irisignore.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path

from iris.core.errors import InvalidArgument

MAX_WORKSPACE_BYTES = 32 * 1024**2  # the files' total size; the controller takes up to 64 MiB zipped
MAX_WORKSPACE_FILES = 10_000
IGNORE_FILES = (".gitignore", ".irisignore")
ALWAYS_SKIPPED = (".git", ".iris")
# The files a controller holds in its state directory and a worker daemon in its --work-dir.
STATE_DIR_MARKS = ("controller.lock", "worker.lock")
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class WorkspaceFile:
    name: str  # relative, '/'-separated
    path: Path
    size: int
    executable: bool


@dataclass(frozen=True, slots=True)
class Bundle:
    """A packed workspace: its content id, the zip bytes, and what went in."""

    content_id: str
    data: bytes
    files: int
    size: int  # the files' total size, before compression
    root: str


def human_size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _load_spec(folder: Path):
    lines: list[str] = []
    for name in IGNORE_FILES:
        try:
            lines += (folder / name).read_text(errors="replace").splitlines()
        except OSError:
            continue
    if not lines:
        return None
    from pathspec import GitIgnoreSpec

    return GitIgnoreSpec.from_lines(lines)


def _ignored(specs: list[tuple[str, object]], rel: str, is_dir: bool) -> bool:
    """Whether `rel` is ignored: the deepest ignore file with a matching line decides (as in git)."""
    for base, spec in reversed(specs):
        if base and not rel.startswith(base + "/"):
            continue
        sub = rel[len(base) + 1 :] if base else rel
        result = spec.check_file(sub + "/" if is_dir else sub)  # type: ignore[attr-defined]
        if result.include is not None:
            return bool(result.include)
    return False


def collect(root: str | Path) -> list[WorkspaceFile]:
    """The files of `root` that travel with a job, sorted by name (symbolic links are skipped)."""
    root = Path(root).resolve()
    if not root.is_dir():
        raise InvalidArgument(f"workspace folder {root} does not exist or is not a folder; pass --workdir DIR")
    out: list[WorkspaceFile] = []
    specs: list[tuple[str, object]] = []

    def walk(folder: Path, rel: str) -> None:
        spec = _load_spec(folder)
        if spec is not None:
            specs.append((rel, spec))
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            raise InvalidArgument(f"cannot read {folder}: {exc.strerror}; fix its permissions or ignore it") from None
        for entry in entries:
            name = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_symlink() or entry.name in ALWAYS_SKIPPED:
                continue
            if entry.is_dir():
                state_dir = any(os.path.exists(os.path.join(entry.path, mark)) for mark in STATE_DIR_MARKS)
                if not state_dir and not _ignored(specs, name, True):
                    walk(Path(entry.path), name)
            elif entry.is_file() and not _ignored(specs, name, False):
                st = entry.stat()
                out.append(WorkspaceFile(name, Path(entry.path), st.st_size, bool(st.st_mode & stat.S_IXUSR)))
                if len(out) > MAX_WORKSPACE_FILES:
                    raise InvalidArgument(
                        f"the workspace {root} has more than {MAX_WORKSPACE_FILES} files; list what the job"
                        " does not need in .irisignore, or pass --workdir DIR or --no-workspace"
                    )
        if spec is not None:
            specs.pop()

    walk(root, "")
    return out


def check_size(root: str | Path, files: list[WorkspaceFile], limit: int = MAX_WORKSPACE_BYTES) -> None:
    """Refuses a workspace past `limit`, naming its biggest files and how to leave them out."""
    total = sum(f.size for f in files)
    if total <= limit:
        return
    biggest = sorted(files, key=lambda f: -f.size)[:5]
    listed = ", ".join(f"{f.name} ({human_size(f.size)})" for f in biggest)
    raise InvalidArgument(
        f"the workspace {root} is {human_size(total)}, over the {human_size(limit)} that may travel with a job;"
        f" the biggest files: {listed}. List them in .irisignore, or pass --workdir DIR (another folder)"
        " or --no-workspace"
    )


def pack(files: list[WorkspaceFile], root: str | Path = "") -> Bundle:
    """Zips `files` reproducibly and returns the bundle with its content id."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        for f in files:
            info = zipfile.ZipInfo(f.name, _ZIP_EPOCH)
            info.external_attr = ((0o755 if f.executable else 0o644) | stat.S_IFREG) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            try:
                data = f.path.read_bytes()
            except OSError as exc:
                raise InvalidArgument(f"cannot read {f.path}: {exc.strerror}; fix it or ignore it") from None
            zf.writestr(info, data)
    data = buf.getvalue()
    return Bundle("sha256:" + hashlib.sha256(data).hexdigest(), data, len(files), sum(f.size for f in files), str(root))


def build_bundle(root: str | Path, limit: int = MAX_WORKSPACE_BYTES) -> Bundle:
    """The workspace bundle of `root`: what is not ignored, checked against the size limit, zipped."""
    files = collect(root)
    check_size(root, files, limit)
    return pack(files, Path(root).resolve())
