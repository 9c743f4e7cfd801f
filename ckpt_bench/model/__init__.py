"""The model a checkpoint holds, described once: what every engine and every size figure derives from.

    architecture.py   `Architecture`: the transformer megatron-core builds (dense or MoE MLPs, standard or
                      multi-latent attention, MTP layers, tied embeddings, the padded vocabulary, dtypes),
                      read from Megatron-LM's arguments (`Architecture.from_megatron_args`)
    tensors.py        `Param`: every parameter of that model, with megatron-core's checkpoint key, its full
                      shape and how it is split (TP, EP/ETP); total and active parameter counts
    parallel.py       `Parallelism`: TP, PP (with its stage layout), EP, ETP, CP and DP of a job, each rank's
                      coordinates in megatron's orders, and the layouts megatron-core refuses
    pipeline_layout.py  `PipelineLayout`: each (pipeline rank, virtual stage) model chunk's layers, embedding,
                      output layer and MTP layers (even splits, first/last stage sizes, layout strings)
    families.py       the model families we can size, and one line for each we cannot (Mamba, hybrids,
                      diffusion, ...), registered in one place
    tokenizers.py     the vocabulary of a named tokenizer, with where each size comes from

Plain Python, no torch: a 1,024-rank plan is built from it in seconds.
"""
