"""benchmarks/in_span_overhead.py end to end (issue 22): the DCP worker's own timed save and a bare
`dcp.save` alternate in one process under torchrun, and the ratio comes from the events the report reads."""

from __future__ import annotations

import re
import subprocess
import sys

from helpers import ROOT


def test_in_span_overhead_pairs_the_worker_save_with_the_bare_call(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "in_span_overhead.py"), "--model", "tiny",
                           "--pairs", "2", "--dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    pairs = re.findall(r"^pair +(\d+) \((ours|bare) first\): ours ([\d.]+) s  bare ([\d.]+) s", done.stdout, re.M)
    assert [(index, first) for index, first, *_ in pairs] == [("1", "bare"), ("2", "ours")]
    assert all(float(ours) > 0 and float(bare) > 0 for *_, ours, bare in pairs)
    assert re.search(r"ours / bare [\d.]+ \(95% CI [\d.]+-[\d.]+, 2 pairs\): (within 5%|over 5%|undecided)$",
                     done.stdout.strip())
    assert not list((tmp_path / "saves").iterdir())  # each save removed after its pair
