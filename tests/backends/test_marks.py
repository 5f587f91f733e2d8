"""The marker store across crashes: a marker cut short while written, and one whose attempt's end
was stored before the crash; and the workers backend reading its markers once on a restart."""

from __future__ import annotations

from iris.backends.marks import LiveMarks
from iris.backends.protocol import AdoptRecord
from tests.backends.test_workers_backend import _backend, _register


def test_marks_opened_after_a_crash_mid_write_remove_the_unrenamed_file(tmp_path):
    folder = tmp_path / "live"
    LiveMarks(folder).put("/u/a/0:0", 17)
    (folder / "cut-short.tmp").write_text("/u/b/0:0\n")  # written, never renamed: the crash came first
    marks = LiveMarks(folder)
    assert not list(folder.glob("*.tmp"))
    assert marks.read() == {"/u/a/0:0": 17}


def test_marks_forget_drops_settled_markers_and_returns_the_strays(tmp_path):
    marks = LiveMarks(tmp_path / "live")
    for n, attempt_id in enumerate(("/u/kept/0:0", "/u/ended/0:0", "/u/gone/0:0"), start=1):
        marks.put(attempt_id, n)
    strays = marks.forget(marks.read(), {"/u/kept/0:0"}, {"/u/ended/0:0", "/u/never-marked/0:0"})
    assert strays == {"/u/gone/0:0": 3}
    assert marks.read() == {"/u/kept/0:0": 1, "/u/gone/0:0": 3}, "only the settled marker is dropped"


class CountingMarks(LiveMarks):
    reads = 0

    def read(self):
        self.reads += 1
        return super().read()


def test_workers_backend_restart_reads_markers_once_and_forgets_a_settled_attempt(tmp_path):
    before = _backend(tmp_path)
    for attempt_id in ("/u/live/0:0", "/u/ended/0:0", "/u/dropped/0:0"):
        before.marks.put(attempt_id)

    after = _backend(tmp_path)
    after.marks = counting = CountingMarks(after.marks.folder)
    assert after.leftovers() == {"/u/live/0:0", "/u/ended/0:0", "/u/dropped/0:0"}
    after.adopt([AdoptRecord("/u/live/0:0", "w1", 0, "", 0, 0)], frozenset({"/u/ended/0:0"}))
    assert counting.reads == 1
    assert after.running() == {"/u/live/0:0"}, "the settled attempt is not taken back to be stopped"
    assert after.marks.read() == {"/u/live/0:0": None}
    # A daemon that still ran either is told to kill it; the live one is resumed.
    again = _register(after, attempts=["/u/live/0:0", "/u/ended/0:0", "/u/dropped/0:0"])
    assert sorted(again.kill) == ["/u/dropped/0:0", "/u/ended/0:0"]
