"""Synthetic checkpoint workloads: DLIO / MLPerf Storage checkpoint shapes (`shapes`), computed without torch."""
