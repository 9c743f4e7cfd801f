"""Launching benchmarks: backends say what to run (`Backend.plan`), `base.execute` runs it."""

from bench.launcher.megatron import MegatronBackend

BACKENDS = {backend.name: backend for backend in (MegatronBackend(),)}
