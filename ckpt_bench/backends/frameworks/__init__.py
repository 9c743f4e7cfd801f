"""Framework modes: the real Primus (`primus`) and Megatron-LM (`megatron_lm`) run the experiment,
what both share is `common`, and their logs become events through the log parsers.
"""
