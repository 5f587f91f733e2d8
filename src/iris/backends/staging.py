"""Where a job's files land on the host that runs it, and how they get there safely.

Every backend kind needs this on whichever host runs the attempt (the controller's for `local`, a
worker's or a Slurm node's otherwise), so it lives beside the contract rather than inside one
backend. A workspace bundle is a zip stored by content id (`sha256:<hex>`); it is unpacked once
into `<root>/bundles/<hex>/`, shared by every job that ships the same tree, and a job's workdir
files likewise by the content id of the set. Each attempt starts from its own copy of these
layers, made by its backend as part of starting it and removed with it, so tasks never see each
other's writes and a retry starts clean.

Nothing is trusted: names are checked (normalised, relative, no component that is `.` or `..`,
no name that is both a file and a folder), and a bundle's expanded size and file count are read
from its directory and bounded before a byte is written. Unpacking counts what it writes, so a zip
that lies about its sizes stops at the bound too, and files are created exclusively without
following links. A folder is filled beside its final name and renamed into place, so concurrent
callers agree and a reader never sees half of it.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import stat
import tempfile
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from iris.core.errors import InvalidArgument

MAX_EXPANDED_BYTES = 1024**3  # what a bundle may unpack to
MAX_FILES = 20_000
MAX_COMPONENT_BYTES = 255
MAX_PATH_BYTES = 1024
_CHUNK = 1 << 20


def safe_dirname(ident: str) -> str:
    """A folder name for a job or attempt id: readable, filesystem-safe, and unique per id."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", ident.strip("/"))[:80]
    digest = hashlib.sha1(ident.encode()).hexdigest()[:10]
    return f"{readable}-{digest}"


@dataclass(frozen=True, slots=True)
class BundleInfo:
    """A bundle that passed every check: its content id, zip size, file count and expanded size."""

    content_id: str
    size: int
    files: int
    expanded: int


def content_id(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _hex(bundle_id: str) -> str:
    algo, _, digest = bundle_id.partition(":")
    if algo != "sha256" or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise InvalidArgument(f"bundle id {bundle_id!r} is not of the form sha256:<64 lowercase hex digits>")
    return digest


def check_name(name: str) -> str:
    """Returns `name` if it is a normalised relative path inside the workspace; else InvalidArgument."""
    fix = "rename it, or leave it out of the workspace (.irisignore)"
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"a workspace file has an empty name; {fix}")
    if any(ord(c) < 32 or c == "\x7f" for c in name) or "\\" in name:
        raise InvalidArgument(f"workspace file name {name!r} contains a control character or a backslash; {fix}")
    if name.startswith("/"):
        raise InvalidArgument(f"workspace file name {name!r} is absolute; paths are relative to the workspace")
    if len(name.encode()) > MAX_PATH_BYTES:
        raise InvalidArgument(f"workspace file name {name[:60]!r}… is longer than {MAX_PATH_BYTES} bytes; {fix}")
    for part in name.split("/"):
        if part in ("", ".", ".."):
            raise InvalidArgument(
                f"workspace file name {name!r} is not a normalised path inside the workspace"
                " (no empty, '.' or '..' components)"
            )
        if len(part.encode()) > MAX_COMPONENT_BYTES:
            raise InvalidArgument(
                f"workspace file name {name[:60]!r}… has a component longer than {MAX_COMPONENT_BYTES} bytes; {fix}"
            )
    return name


def check_tree(entries: Iterable[tuple[str, bool]]) -> None:
    """Refuses a set of (name, is_folder) entries holding a name twice, or one name as file and folder."""
    files: set[str] = set()
    folders: set[str] = set()
    for name, is_folder in entries:
        check_name(name)
        parts = name.split("/")
        folders.update("/".join(parts[:i]) for i in range(1, len(parts)))
        if is_folder:
            folders.add(name)
        elif name in files:
            raise InvalidArgument(f"workspace file {name!r} appears twice")
        else:
            files.add(name)
    clash = sorted(files & folders)
    if clash:
        raise InvalidArgument(
            f"workspace name {clash[0]!r} is both a file and a folder (e.g. both 'a' and 'a/b'); rename one of them"
        )


def _entries(zf: zipfile.ZipFile) -> list[tuple[zipfile.ZipInfo, str, bool]]:
    out = []
    for info in zf.infolist():
        name = info.orig_filename  # zipfile cuts `filename` at a NUL byte; the raw name must be checked
        is_folder = name.endswith("/")
        out.append((info, name[:-1] if is_folder else name, is_folder))
    return out


def inspect_bundle(data: bytes, claimed_id: str = "") -> BundleInfo:
    """Checks a bundle before anything is stored or unpacked: a zip, sane names, bounded expansion."""
    cid = content_id(data)
    if claimed_id and claimed_id != cid:
        raise InvalidArgument(f"bundle_id {claimed_id!r} does not match the bundle's content ({cid})")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            entries = _entries(zf)
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise InvalidArgument(f"workspace_bundle must be a zip archive ({exc})") from None
    if len(entries) > MAX_FILES:
        raise InvalidArgument(
            f"the workspace bundle holds {len(entries)} entries; at most {MAX_FILES} may be unpacked"
            " (leave generated files out with .irisignore)"
        )
    expanded = sum(info.file_size for info, _, _ in entries)
    if expanded > MAX_EXPANDED_BYTES:
        raise InvalidArgument(
            f"the workspace bundle expands to {expanded} bytes; at most {MAX_EXPANDED_BYTES} may be unpacked"
        )
    check_tree((name, is_folder) for _, name, is_folder in entries)
    return BundleInfo(cid, len(data), sum(1 for _, _, d in entries if not d), expanded)


def bundle_folder(state_dir: Path, bundle_id: str) -> Path:
    return state_dir / "bundles" / _hex(bundle_id)


def files_id(files: dict[str, bytes]) -> str:
    """The content id of a set of workdir files: equal sets share one unpacked folder."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return "sha256:" + digest.hexdigest()


def unpack_bundle(state_dir: Path, bundle_id: str, data: bytes) -> Path:
    """Unpacks a checked bundle into its content folder (once; concurrent callers agree on the result)."""
    target = bundle_folder(state_dir, bundle_id)
    if target.is_dir():
        return target
    inspect_bundle(data, bundle_id)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            publish_folder(target, lambda tmp: _extract(zf, tmp))
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, NotImplementedError) as exc:
        raise InvalidArgument(
            f"the workspace bundle is damaged and cannot be unpacked ({exc}); pack it again"
        ) from None
    return target


def write_files(state_dir: Path, files: dict[str, bytes]) -> str:
    """Writes checked workdir files into their content folder (once); returns their id ("" for none)."""
    if not files:
        return ""
    fid = files_id(files)
    target = bundle_folder(state_dir, fid)
    if target.is_dir():
        return fid

    def fill(tmp: Path) -> None:
        for name, data in files.items():
            path = tmp / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

    publish_folder(target, fill)
    return fid


def layers(state_dir: Path, bundle_id: str, files_id: str) -> tuple[str, ...]:
    """The folders an attempt's working folder is copied from, in order (later ones on top)."""
    return tuple(str(bundle_folder(state_dir, i)) for i in (bundle_id, files_id) if i)


def publish_folder(target: Path, fill) -> None:
    """Fills a fresh folder beside `target`, then renames it into place (readers never see half of it)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        fill(tmp)
        os.rename(tmp, target)
    except OSError:
        if not target.is_dir():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _extract(zf: zipfile.ZipFile, root: Path) -> None:
    budget = MAX_EXPANDED_BYTES
    for info, name, is_folder in _entries(zf):
        path = root / name
        if is_folder:
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with zf.open(info) as src, os.fdopen(fd, "wb") as dst:
            left = info.file_size
            while chunk := src.read(_CHUNK):
                left -= len(chunk)
                budget -= len(chunk)
                if left < 0 or budget < 0:
                    raise InvalidArgument(f"workspace file {name!r} expands past the size its bundle declares")
                dst.write(chunk)
        mode = (info.external_attr >> 16) & 0o777
        if mode and not stat.S_ISLNK(info.external_attr >> 16):
            os.chmod(path, mode | 0o600)
