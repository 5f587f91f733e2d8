"""The output spool reader: line cuts, the cap, and releasing read bytes, over real files."""

from __future__ import annotations

import os

from iris.backends.spool import MAX_LINE, OutputSpool, cut_lines


def test_cut_lines_without_newline_waits_until_complete():
    assert cut_lines(b"partial", complete=False) == (0, [])
    assert cut_lines(b"partial", complete=True) == (7, ["partial"])


def test_cut_lines_keeps_the_unterminated_tail_for_later():
    assert cut_lines(b"a\nb\nrest", complete=False) == (4, ["a", "b"])


def test_cut_lines_splits_a_line_that_never_ends_at_max_line():
    cut, lines = cut_lines(b"y" * (MAX_LINE + 10), complete=False)
    assert cut == MAX_LINE and lines == ["y" * MAX_LINE]


def test_cut_lines_does_not_split_a_utf8_character():
    data = b"y" * (MAX_LINE - 1) + "é".encode() + b"tail"
    cut, lines = cut_lines(data, complete=False)
    assert cut == MAX_LINE - 1 and lines == ["y" * (MAX_LINE - 1)]


def test_cut_lines_splits_an_overlong_line_inside_a_chunk():
    cut, lines = cut_lines(b"z" * (MAX_LINE * 2 + 1) + b"\nshort\n", complete=False)
    assert [len(x) for x in lines] == [MAX_LINE, MAX_LINE, 1, 5]


def _drain(spool: OutputSpool, complete: bool = True) -> list[tuple[str, str]]:
    out = []
    while pieces := spool.read(complete):
        for p in pieces:
            out.extend((p.stream, line) for line in p.lines)
    return out


def test_spool_caps_output_with_one_marker_and_discards_the_rest(tmp_path):
    (tmp_path / "stdout").write_bytes(b"0123456789\n" * 100)  # 1100 bytes
    (tmp_path / "stderr").write_bytes(b"")
    spool = OutputSpool(tmp_path, cap=55)
    lines = _drain(spool)
    assert [text for _, text in lines[:5]] == ["0123456789"] * 5
    assert len(lines) == 6 and "output truncated" in lines[5][1]
    assert spool.drained()
    with open(tmp_path / "stdout", "ab") as f:
        f.write(b"more\n" * 10)
    assert _drain(spool) == [] and spool.drained()  # past the cap: discarded unread


def test_spool_resumed_past_its_cap_stays_truncated_without_a_second_marker(tmp_path):
    (tmp_path / "stdout").write_bytes(b"x\n" * 100)
    (tmp_path / "stderr").write_bytes(b"")
    spool = OutputSpool(tmp_path, cap=50, offsets={"stdout": 50, "stderr": 0})
    assert _drain(spool) == [] and spool.drained()


def test_spool_releases_committed_bytes_but_keeps_offsets(tmp_path):
    path = tmp_path / "stdout"
    path.write_bytes(b"a" * 1023 + b"\n" + b"b" * (4 << 20))
    (tmp_path / "stderr").write_bytes(b"")
    spool = OutputSpool(tmp_path, cap=0)
    before = os.stat(path).st_blocks
    lines = _drain(spool)
    assert sum(len(t) for _, t in lines) == 1023 + (4 << 20)
    spool.commit("stdout", spool.cursors["stdout"].offset)
    spool.release(final=True)
    assert os.stat(path).st_size == 1024 + (4 << 20)
    assert os.stat(path).st_blocks < before // 8
