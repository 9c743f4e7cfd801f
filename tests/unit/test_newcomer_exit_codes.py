"""Exit codes as the README's table says, for both commands (issue 31, item 2): bad input is 2, whatever the
input is (an option, a path, a log with nothing to report)."""

from __future__ import annotations

from helpers import assert_one_line_error, ckpt_report


def test_a_log_with_no_checkpoint_in_it_is_bad_input(tmp_path):
    junk = tmp_path / "junk.log"
    junk.write_text("hello\nnothing to see here\n")
    line = assert_one_line_error(ckpt_report(junk), "no checkpoint save or load found", code=2)
    assert str(junk) in line
