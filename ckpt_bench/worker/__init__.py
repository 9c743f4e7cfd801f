"""The rank side, shared by every backend's worker: the worker contract (`entry`: ranks, device,
timing, exit codes), integrity digests (`integrity`) and per-operation peak memory (`memory`).
"""
