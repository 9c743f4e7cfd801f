"""The shared vocabulary every layer speaks: options (`Flag`), errors, checkpoint events, the run
directory's layout, checkpoint folders, the Primus/Megatron experiment YAML, units, the host's description.
"""
