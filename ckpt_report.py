#!/usr/bin/env python3
"""Report checkpoint saves and loads from logs: `python ckpt_report.py --help` (installed: `ckpt-report`)."""

from ckpt_bench.cli.report import main

if __name__ == "__main__":
    main()
