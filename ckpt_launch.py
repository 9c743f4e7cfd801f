#!/usr/bin/env python3
"""Run a checkpoint benchmark: `python ckpt_launch.py --help`."""

from bench.cli import main

if __name__ == "__main__":
    main()
