"""Many runs from one file: ckpt-bench sweep files and other benchmarks' own configs (`peers`), run as
jobs through the same launch, with resume and one table at the end (`run`).
"""
