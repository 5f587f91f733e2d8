"""Reads kept between writes (`iris.controller.db.answers`): the same read asked again unchanged is
read once, a read that overlaps a write is not handed out after it, and a listing always shows
the writes its caller was told of."""

from __future__ import annotations

from collections.abc import Callable

from iris.controller.db.answers import Answers
from iris.controller.db.database import Database, sql
from iris.rpc import controller_pb2 as pb
from tests.controller.helpers import client, launch, wait_state


def _version(db: Database) -> int:
    with db.read() as conn:
        return conn.execute(sql("SELECT version FROM schedule_inputs WHERE id = 0")).scalar_one()


def _write(db: Database) -> None:
    with db.write() as conn:
        conn.execute(sql("UPDATE schedule_inputs SET version = version + 1 WHERE id = 0"))


def test_answers_same_read_without_a_write_is_read_once(tmp_path):
    db = Database(tmp_path / "controller.db")
    answers: Answers[int] = Answers(db)
    calls: list[str] = []

    def read(key: str) -> int:
        calls.append(key)
        return _version(db)

    first = answers.get("a", lambda: read("a"))
    assert answers.get("a", lambda: read("a")) == first
    answers.get("b", lambda: read("b"))
    assert answers.get("b", lambda: read("b")) == first
    assert calls == ["a", "b"]
    db.close()


def test_answers_after_a_write_are_read_again(tmp_path):
    db = Database(tmp_path / "controller.db")
    answers: Answers[int] = Answers(db)
    before = answers.get("a", lambda: _version(db))
    _write(db)
    assert answers.get("a", lambda: _version(db)) == before + 1
    db.close()


def test_answers_read_across_a_write_is_not_handed_out_after_it(tmp_path):
    db = Database(tmp_path / "controller.db")
    answers: Answers[int] = Answers(db)

    def read_across_a_write() -> int:
        with db.read() as conn:  # the snapshot is taken by the first statement, before the write
            seen = conn.execute(sql("SELECT version FROM schedule_inputs WHERE id = 0")).scalar_one()
            _write(db)
            return seen

    before = answers.get("a", read_across_a_write)
    assert answers.get("a", lambda: _version(db)) == before + 1
    db.close()


class _Watched(Database):
    """A database that runs `on_move` each time its generation is about to move: the last moment
    of a write, after its commit, when other reads already see what it wrote."""

    on_move: Callable[[], None] = staticmethod(lambda: None)

    @property
    def generation(self) -> int:
        return self._generation

    @generation.setter
    def generation(self, value: int) -> None:
        self.on_move()
        self._generation = value


def test_answers_show_a_write_as_soon_as_another_read_sees_it(tmp_path):
    db = _Watched(tmp_path / "controller.db")
    answers: Answers[int] = Answers(db)
    answers.get("a", lambda: _version(db))
    seen: list[tuple[int, int]] = []  # (what a plain read sees, the answer handed out) at each move

    def read_both() -> None:
        seen.append((_version(db), answers.get("a", lambda: _version(db))))

    db.on_move = read_both
    _write(db)
    db.on_move = lambda: None
    assert seen and all(answer == current for current, answer in seen), seen
    db.close()


def test_list_jobs_shows_each_write_after_the_same_listing(controller):
    c = client(controller)
    first = launch(c, "first", ["sleep", "60"])
    request = pb.ListJobsRequest()
    assert [j.job_id for j in c.list_jobs(request).jobs] == [first]
    assert [j.job_id for j in c.list_jobs(request).jobs] == [first]
    second = launch(c, "second", ["true"])
    assert [j.job_id for j in c.list_jobs(request).jobs] == [second, first]
    c.terminate_job(pb.TerminateJobRequest(job_id=first))
    wait_state(c, first)
    listed = {j.job_id: j.state for j in c.list_jobs(request).jobs}
    assert listed[first] == "KILLED"
