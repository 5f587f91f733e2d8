"""Keeps the answers of the latest reads until the database is next written, so that a read asked
again unchanged (`iris job list` polled in a loop, the dashboard's jobs page, several people
watching one queue) is a lookup instead of its queries and a page built again.

A page of 1,000 jobs costs the controller about 6 ms of CPU (its queries and the message built
from their rows, measured on a 2-core host with 110,000 jobs); handing out the same message again
costs its encoding alone. Answers are kept per write generation (`Database.generation`), not for
a time: an answer is never older than the latest write a caller was told of, so keeping them
changes no answer, only when it is worked out.

Why that holds: the generation is read before the read's snapshot begins, and an answer is handed
out only while the generation is still the one read then. A write moves the generation to odd as it
begins and to even once its transaction has ended, before its caller hears back; while it is odd no
answer is kept or handed out, since the commit shows to other reads (a job's status, another
listing) before the write ends. So any write that a request, or anything its caller saw before it,
could have seen has moved the generation past every answer whose snapshot might not hold it. A read
that overlaps a write may keep an answer under the older generation, which is then never handed
out again. Only the latest generation's answers are held, at most `MOST_ANSWERS` of them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from iris.controller.db.database import Database

T = TypeVar("T")
# Distinct reads kept per generation: a few filters and pages polled at once. A kept page of
# 5,000 jobs (the largest) holds a few MB.
MOST_ANSWERS = 8


class Answers(Generic[T]):
    """The answers of reads of `db`, each kept under its key until the next write."""

    def __init__(self, db: Database, most: int = MOST_ANSWERS):
        self._db = db
        self._most = most
        self._held: tuple[int, dict[Hashable, T]] = (-1, {})  # (generation, answers), swapped whole
        self._lock = threading.Lock()

    def get(self, key: Hashable, read: Callable[[], T]) -> T:
        """The answer of `read()` (which must not change the database) for `key`: kept from an
        earlier call while nothing has been written since, else read now (and kept). A kept
        answer is shared between callers, which must not change it."""
        generation = self._db.generation
        if generation % 2:  # a write is under way: what it commits shows before the generation moves on
            return read()
        held_generation, held = self._held
        if held_generation == generation:
            found = held.get(key)
            if found is not None:
                return found
        answer = read()
        with self._lock:
            held_generation, held = self._held
            if held_generation < generation:
                self._held = (generation, {key: answer})
            elif held_generation == generation and len(held) < self._most:
                held[key] = answer
        return answer
