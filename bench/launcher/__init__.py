"""Launching benchmarks: backends say what to run (`Backend.plan`), `base.execute` runs it."""

from bench.launcher.comms import CommsBackend
from bench.launcher.dcp import DcpBackend
from bench.launcher.lightning import LightningBackend
from bench.launcher.megatron import MegatronBackend

BACKENDS = {backend.name: backend for backend in (MegatronBackend(), DcpBackend(), CommsBackend(), LightningBackend())}
