"""Comms preflight: how fast the ranks' fabric moves data, before any checkpoint is timed.

A fully-parallel save or load moves shards between ranks; a slow fabric explains a slow checkpoint.
`measure` times the collectives with nccl-tests' definitions; `worker` is the torchrun entry point.
"""
