"""Reads an attempt's output spool into log lines in bounded memory, and decides what is kept.

It decides where lines are cut (at a newline, or every `MAX_LINE` bytes of a line that never ends),
when an attempt's output passes its cap (a marker line, then everything after it is discarded
unread), and which bytes of the spool may be given back to the disk.

Every backend whose attempts write their output to files the controller can read (the local
backend's attempt folders, Slurm's output files in its staging folder) reads them through this one
module. Why a file spool, and why it is emptied as it is read: the attempt writes stdout and stderr to
files in its folder, not to pipes, because a file outlives a controller crash (the attempt keeps
running and writing; the next controller resumes at the offsets stored with the lines). But the
database is the one store of output: once lines are committed there, their bytes in the spool are
released by punching a hole (the file keeps its length, so offsets stay valid, but holds no disk
blocks), output past the cap is released without being read, and the files are removed when the
attempt's last line is stored. So a job's output occupies the disk once, and a job printing
faster than the controller can store holds at most its cap on disk.

Memory is bounded by construction: a read takes at most `READ_CHUNK` bytes of one stream, a line
is at most `MAX_LINE` bytes, and the caller stops reading while too many lines wait to be stored.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from dataclasses import dataclass
from pathlib import Path

MAX_LINE = 64 * 1024  # a longer line is stored as several lines of this size
READ_CHUNK = 64 * 1024  # bytes read from one stream at a time
RELEASE_STEP = 1 << 20  # release committed spool bytes in steps of at least this much
STREAMS = ("stdout", "stderr")

_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]


def truncation_marker(cap: int) -> str:
    return (
        f"[iris] output truncated: this attempt wrote more than {cap / 1024**2:g} MiB of output; the rest is"
        " discarded while it keeps running (raise controller.log_max_output to keep more)"
    )


def punch_hole(path: Path, start: int, end: int) -> bool:
    """Releases the disk blocks of bytes [start, end) of `path`; False where the filesystem cannot."""
    if end <= start:
        return True
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return False
    try:
        if _libc.fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, start, end - start) != 0:
            return ctypes.get_errno() not in (errno.EOPNOTSUPP, errno.ENOSYS)
        return True
    finally:
        os.close(fd)


def _char_boundary(data: bytes, cut: int) -> int:
    """Moves `cut` back over at most three UTF-8 continuation bytes, so a character is not split."""
    back = cut
    while back > 0 and back > cut - 4 and back < len(data) and (data[back] & 0xC0) == 0x80:
        back -= 1
    return back if back > 0 else cut


def cut_lines(data: bytes, complete: bool) -> tuple[int, list[str]]:
    """How many bytes of `data` to consume now, and the lines they hold.

    Consumes up to the last newline. With no newline, a line of `MAX_LINE` bytes or more is cut at
    that size, and a `complete` buffer (the attempt ended, or the cap ends it) is taken whole.
    Otherwise nothing is consumed: the rest of the line has not been written yet.
    """
    newline = data.rfind(b"\n")
    if newline >= 0:
        cut = newline + 1
    elif len(data) >= MAX_LINE:
        cut = _char_boundary(data, MAX_LINE)
    elif complete and data:
        cut = len(data)
    else:
        return 0, []
    lines = data[:cut].decode("utf-8", "replace").splitlines()
    if any(len(line) > MAX_LINE for line in lines):
        lines = [piece for line in lines for piece in line_pieces(line)]
    return cut, lines


def line_pieces(line: str) -> list[str]:
    """`line` as stored: cut every `MAX_LINE` characters."""
    return [line[i : i + MAX_LINE] for i in range(0, len(line), MAX_LINE)] if len(line) > MAX_LINE else [line]


@dataclass
class Cursor:
    """Where one stream stands: read up to `offset`, stored up to `committed`, released up to
    `released`; after the cap, bytes from `stop_at` on are discarded."""

    offset: int = 0
    committed: int = 0
    released: int = 0
    stop_at: int | None = None


@dataclass(frozen=True, slots=True)
class Piece:
    stream: str
    lines: tuple[str, ...]
    end_offset: int


class OutputSpool:
    """The stdout and stderr spool files of one attempt, read in order, capped at `cap` bytes."""

    def __init__(self, folder: Path, cap: int, offsets: dict[str, int] | None = None):
        self.folder = folder
        self.cap = cap
        start = offsets or {}
        self.cursors = {s: Cursor(start.get(s, 0), start.get(s, 0)) for s in STREAMS}
        self.truncated = sum(c.offset for c in self.cursors.values()) >= cap > 0
        if self.truncated:
            for c in self.cursors.values():
                c.stop_at = c.offset
        self._can_release = True

    def read(self, complete: bool) -> list[Piece]:
        """The next lines of each stream (one bounded read per stream); `complete` once the
        attempt has ended, so an unterminated last line is taken as it is."""
        out = []
        for stream in STREAMS:
            piece = self._read_stream(stream, complete)
            if piece is not None:
                out.append(piece)
        return out

    def drained(self) -> bool:
        """True when every byte written so far has been read or discarded."""
        return all(self._size(s) <= c.offset for s, c in self.cursors.items())

    def commit(self, stream: str, offset: int) -> None:
        cursor = self.cursors[stream]
        cursor.committed = max(cursor.committed, offset)

    def release(self, final: bool = False) -> None:
        """Gives back the disk blocks of stored and discarded bytes."""
        if not self._can_release:
            return
        for stream, c in self.cursors.items():
            path = self.folder / stream
            if c.committed - c.released >= RELEASE_STEP or (final and c.committed > c.released):
                if not punch_hole(path, c.released, c.committed):
                    self._can_release = False
                    return
                c.released = c.committed
            if c.stop_at is not None:
                size = self._size(stream)
                if size > c.stop_at and not punch_hole(path, c.stop_at, size):
                    self._can_release = False
                    return

    def remove(self) -> None:
        for stream in STREAMS:
            (self.folder / stream).unlink(missing_ok=True)

    def _size(self, stream: str) -> int:
        try:
            return os.stat(self.folder / stream).st_size
        except OSError:
            return 0

    def _read_stream(self, stream: str, complete: bool) -> Piece | None:
        cursor = self.cursors[stream]
        if cursor.stop_at is not None:
            size = self._size(stream)
            if size > cursor.offset:
                cursor.offset = size  # past the cap: discarded unread (its blocks released later)
            return None
        room = self.cap - sum(c.offset for c in self.cursors.values()) if self.cap > 0 else READ_CHUNK
        if room <= 0:
            return self._truncate(stream)
        want = min(READ_CHUNK, room)
        try:
            with open(self.folder / stream, "rb") as f:
                f.seek(cursor.offset)
                data = f.read(want)
        except OSError:
            return None
        if not data:
            return None
        # A read cut short by the cap is as complete as it will ever be.
        cut, lines = cut_lines(data, complete or len(data) >= room)
        if cut == 0:
            return None
        cursor.offset += cut
        if self.cap > 0 and sum(c.offset for c in self.cursors.values()) >= self.cap:
            marker = self._truncate(stream)
            lines.extend(marker.lines if marker else ())
        return Piece(stream, tuple(lines), cursor.offset)

    def _truncate(self, stream: str) -> Piece | None:
        if self.truncated:
            return None
        self.truncated = True
        for c in self.cursors.values():
            c.stop_at = c.offset
        return Piece(stream, (truncation_marker(self.cap),), self.cursors[stream].offset)
