"""Where a job's files land on the host that runs it, and how they get there safely.

Every backend kind needs this on whichever host runs the attempt (the controller's for `local`, a
worker's or a Slurm node's otherwise), so it lives beside the contract rather than inside one
backend. A workspace bundle is a zip stored by content id (`sha256:<hex>`); it is unpacked once
into `<root>/bundles/<hex>/`, shared by every job that ships the same tree, and a job's workdir
files likewise by the content id of the set. Each attempt starts from its own copy of these
layers, made by its backend as part of starting it and removed with it, so tasks never see each
other's writes and a retry starts clean.

That copy is of folders only (`stage_tree`): each file is a hard link to the one unpacked file,
which is sealed read-only (no write bit for anyone, readable by all, owned by the host's service),
so a job of 45 replicas costs the bundle's bytes once, and a task under a uid of its own cannot
write through a link into the shared file (it may remove or replace the name, its folders are its
own). A task that would run as root (which permission bits do not stop) gets a copy of each file
instead. A layer on another filesystem than the attempts' folder (a state directory on disk, the
attempts in a tmpfs `/tmp`) is copied there once (`near_layer`) and linked from that copy. The
tree is made on a thread of the backend's own, never the tick's: 20,000 files take about half a
second to link.

Nothing is trusted: names are checked (normalised, relative, no component that is `.` or `..`,
no name that is both a file and a folder), and a bundle's expanded size and file count are read
from its directory and bounded before a byte is written. Unpacking counts what it writes, so a zip
that lies about its sizes stops at the bound too, and files are created exclusively without
following links. A folder is filled beside its final name and renamed into place, so concurrent
callers agree and a reader never sees half of it.
"""

from __future__ import annotations

import collections
import errno
import hashlib
import io
import logging
import os
import re
import shutil
import stat
import tempfile
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from iris.core.errors import InvalidArgument

log = logging.getLogger("iris.backends.staging")

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
            path.chmod(sealed(0o644))

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
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with zf.open(info) as src, os.fdopen(fd, "wb") as dst:
            left = info.file_size
            while chunk := src.read(_CHUNK):
                left -= len(chunk)
                budget -= len(chunk)
                if left < 0 or budget < 0:
                    raise InvalidArgument(f"workspace file {name!r} expands past the size its bundle declares")
                dst.write(chunk)
        mode = (info.external_attr >> 16) & 0o777
        os.chmod(path, sealed(mode if mode and not stat.S_ISLNK(info.external_attr >> 16) else 0o644))


def sealed(mode: int) -> int:
    """The permission bits of a shared unpacked file: `mode`'s execute bits, readable by all, writable by none."""
    return (mode & 0o555) | 0o444


def stage_tree(
    layers: Sequence[str], dest: Path, uid: int | None = None, gid: int | None = None, copies: bool = False
) -> None:
    """Fills the folder `dest` (the caller's, empty) with the contents of `layers` in order (later
    ones on top): folders are made anew, files are hard links to the layers' sealed files, or
    copies where a link would not protect them (`uid` None while this process is root: the task
    runs as root; always with `copies`) or cannot be made (another filesystem). With `uid`, the
    folders (and any copied file) are then given to `uid` and `gid`, `dest` last, so no one else
    can enter it while it is filled. OSError when a file cannot be linked or copied (a full disk)."""
    link = not copies and not (uid is None and os.geteuid() == 0) and uid != 0
    made: list[str] = []
    for layer in layers:
        _stage_layer(layer, str(dest), link, made)
    if uid is not None:
        group = uid if gid is None else gid
        for path in reversed(made):
            os.lchown(path, uid, group)
        os.chown(dest, uid, group)


def _stage_layer(layer: str, dest: str, link: bool, made: list[str]) -> None:
    """Adds `layer`'s tree to `dest`, noting in `made` what was made that its task should own."""
    stack = [(layer, dest)]
    while stack:
        src, dst = stack.pop()
        with os.scandir(src) as entries:
            for entry in entries:
                target = os.path.join(dst, entry.name)
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    if not os.path.isdir(target) or os.path.islink(target):
                        _clear(target)
                        os.mkdir(target, stat.S_IMODE(st.st_mode) | 0o700)
                        made.append(target)
                    stack.append((entry.path, target))
                elif stat.S_ISREG(st.st_mode):
                    _clear(target)  # a lower layer's file of this name: the upper one wins
                    if not (link and _link(entry.path, st, target)):
                        shutil.copyfile(entry.path, target, follow_symlinks=False)
                        os.chmod(target, stat.S_IMODE(st.st_mode) | 0o600)
                        made.append(target)
                # Nothing else is unpacked (links and devices never are): anything else is skipped.


def _link(src: str, st: os.stat_result, target: str) -> bool:
    """Links `target` to the layer file `src`, sealing it first; False where it must be copied."""
    mode = stat.S_IMODE(st.st_mode)
    try:
        if mode != sealed(mode):  # unpacked before files were sealed, or written by hand
            os.chmod(src, sealed(mode))
        os.link(src, target, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EACCES):
            return False
        raise
    return True


def _clear(path: str) -> None:
    """Removes whatever is at `path` (never following a link out of it); nothing when it is absent."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except (IsADirectoryError, PermissionError):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            raise


class StagingPool:
    """A few threads that make attempts' working folders, off the thread that starts attempts.

    Work is queued per owner (a user) and taken round-robin: one user's job of 45 replicas over a
    20,000-file workspace holds at most the threads it is given, and another user's attempt waits
    for one folder at most, not for all of the first job's. Bounded by its threads: how many trees
    are made at once; the queue holds what the scheduler placed, which its capacity bounds."""

    def __init__(self, threads: int, name: str):
        self._queues: dict[str, collections.deque[Callable[[], None]]] = {}
        self._turns: collections.deque[str] = collections.deque()  # owners with work, in turn
        self._ready = threading.Condition()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}-{i}", daemon=True) for i in range(max(1, threads))
        ]
        for t in self._threads:
            t.start()

    def submit(self, owner: str, work: Callable[[], None]) -> None:
        """Runs `work` on one of the pool's threads, in `owner`'s turn; it must handle its own errors."""
        with self._ready:
            if self._closed:
                raise RuntimeError("the staging pool is closed")
            queue = self._queues.get(owner)
            if queue is None:
                queue = self._queues[owner] = collections.deque()
                self._turns.append(owner)
            queue.append(work)
            self._ready.notify()

    def queued(self) -> int:
        with self._ready:
            return sum(len(q) for q in self._queues.values())

    def _next(self) -> Callable[[], None] | None:
        with self._ready:
            while not self._turns and not self._closed:
                self._ready.wait()
            if not self._turns:
                return None
            owner = self._turns.popleft()
            queue = self._queues[owner]
            work = queue.popleft()
            if queue:
                self._turns.append(owner)  # to the back: the next owner goes first
            else:
                del self._queues[owner]
            return work

    def _serve(self) -> None:
        while (work := self._next()) is not None:
            try:
                work()
            except Exception:  # one attempt's failure must not take a staging thread with it
                log.exception("staging an attempt's files failed")

    def close(self) -> list[Callable[[], None]]:
        """Stops taking work; returns what was queued and never run (the caller ends those)."""
        with self._ready:
            self._closed = True
            left = [w for q in self._queues.values() for w in q]
            self._queues.clear()
            self._turns.clear()
            self._ready.notify_all()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=5)
        return left


def near_layer(layer: str, root: Path) -> str:
    """`layer`, or where it lies on another filesystem than `root`, a sealed copy of it under
    `root/.layers/` (made once, shared by the attempts that link to it) that can be linked from."""
    if os.stat(layer).st_dev == os.stat(root).st_dev:
        return layer
    target = root / LAYER_COPIES / Path(layer).name
    if not target.is_dir():
        (root / LAYER_COPIES).mkdir(mode=0o700, exist_ok=True)  # reached by links only, never by name
        publish_folder(target, lambda tmp: _copy_sealed(layer, tmp))
    return str(target)


def drop_layer_copies(root: Path, keep: Callable[[str], bool]) -> None:
    """Removes the copies `near_layer` made under `root` whose name `keep` does not accept (their
    layer is gone); attempts that linked to one keep their files."""
    folder = root / LAYER_COPIES
    if folder.is_dir():
        for entry in os.scandir(folder):
            if not entry.name.startswith(".") and not keep(entry.name):
                shutil.rmtree(entry.path, ignore_errors=True)


LAYER_COPIES = ".layers"


def _copy_sealed(layer: str, dest: Path) -> None:
    for folder, dirs, names in os.walk(layer):
        out = dest / os.path.relpath(folder, layer)
        for name in dirs:
            (out / name).mkdir()
        for name in names:
            src = os.path.join(folder, name)
            if os.path.isfile(src) and not os.path.islink(src):
                shutil.copyfile(src, out / name)
                os.chmod(out / name, sealed(stat.S_IMODE(os.stat(src).st_mode)))
