"""ckpt_bench.model: an experiment's arguments read into the model megatron-core builds, what cannot be sized
refused in one line, the vocabulary from the arguments or the tokenizer table."""

from __future__ import annotations

import pytest

from ckpt_bench.model.architecture import Architecture, ArchitectureError, parse_moe_layer_freq
from ckpt_bench.model.job import TrainingJob
from ckpt_bench.model.tensors import parameter_counts

LLAMA = dict(num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
             group_query_attention=True, num_query_groups=8, normalization="RMSNorm", swiglu=True,
             add_bias_linear=False, position_embedding_type="rope", untie_embeddings_and_output_weights=True,
             bf16=True)


@pytest.mark.parametrize(("value", "layers", "expected"), [
    (1, 4, ((True,) * 4, False)),
    ("1", 4, ((True,) * 4, False)),
    (2, 4, ((True, False, True, False), True)),
    ("([0]*1+[1]*3)", 4, ((False, True, True, True), True)),
    ([0, 1, 1, 1], 4, ((False, True, True, True), True)),
])
def test_moe_layer_freq_as_megatron_reads_it(value, layers, expected):
    assert parse_moe_layer_freq(value, layers) == expected


def test_a_list_of_the_wrong_length_or_an_expression_is_refused():
    with pytest.raises(ArchitectureError, match="names 3 layers and the model has 4"):
        Architecture.from_megatron_args({**LLAMA, "num_layers": 4, "vocab_size": 100, "num_experts": 2,
                                         "moe_layer_freq": "[1]*3"})
    with pytest.raises(ArchitectureError, match="only lists, integers"):
        parse_moe_layer_freq("__import__('os')", 4)


def test_the_vocabulary_comes_from_the_arguments_then_the_tokenizer():
    named = {**LLAMA, "tokenizer_type": "Llama3Tokenizer", "tokenizer_model": "meta-llama/Llama-3.1-8B"}
    arch = Architecture.from_megatron_args(named)
    assert arch.vocab_size == 128256 and arch.vocab_source.startswith("meta-llama/Llama-3.1-8B: ")
    assert parameter_counts(arch).total == 8_030_261_248  # Llama 3.1 8B
    assert Architecture.from_megatron_args({**named, "vocab_size": 1000}).vocab_size == 1000
    with pytest.raises(ArchitectureError, match=r"tokenizer_model 'LiquidAI/LFM2-8B-A1B' is not known here.*"
                                                r"--set vocab_size=N"):
        Architecture.from_megatron_args({**LLAMA, "tokenizer_type": "Lfm2Tokenizer",
                                         "tokenizer_model": "LiquidAI/LFM2-8B-A1B"})
    deepseek = Architecture.from_megatron_args({**LLAMA, "tokenizer_type": "DeepSeekV3Tokenizer",
                                                "tokenizer_model": "deepseek-ai/DeepSeek-V3"})
    assert deepseek.vocab_size == 128815 and "config.json's 129,280 is padded" in deepseek.vocab_source


@pytest.mark.parametrize(("args", "family"), [
    (dict(model_type="mamba"), "Mamba"),
    (dict(model_type="mamba", is_hybrid_model=True), "hybrid"),
    (dict(num_joint_layers=19, num_single_layers=38), "diffusion"),
    (dict(experimental_attention_variant="gated_delta_net", linear_attention_freq=4), "linear-attention hybrid"),
    (dict(model_type="deepseek_v4"), "DeepSeek-V4"),
    (dict(model_type="retro"), "model_type 'retro'"),
])
def test_families_we_cannot_size_are_refused_by_name(args, family):
    with pytest.raises(ArchitectureError, match=family):
        Architecture.from_megatron_args({**LLAMA, "vocab_size": 32000, **args})


def test_layouts_and_formats_megatron_lm_refuses_are_refused():
    # two stages on one pipeline rank: virtual stages, which Megatron-LM's interleaved schedule refuses below PP 2
    with pytest.raises(ArchitectureError, match="pipeline_model_parallel_layout makes 2 virtual pipeline stages"):
        TrainingJob.from_megatron_args({**LLAMA, "vocab_size": 32000, "pipeline_model_parallel_layout": "Et|tL"})
    with pytest.raises(ArchitectureError, match=r"use_megatron_fsdp \(ckpt_format fsdp_dtensor\): Megatron-FSDP's "
                       "checkpoint .* is not modelled, so it is not sized"):
        TrainingJob.from_megatron_args({**LLAMA, "vocab_size": 32000, "ckpt_format": "fsdp_dtensor"})
    with pytest.raises(ArchitectureError, match="ckpt_format torch_dcp: Megatron-LM takes it only with use_torch_fsdp"):
        TrainingJob.from_megatron_args({**LLAMA, "vocab_size": 32000, "ckpt_format": "torch_dcp"})
    with pytest.raises(ArchitectureError, match="use_torch_fsdp2 with ckpt_format 'torch': Megatron-LM takes"):
        TrainingJob.from_megatron_args({**LLAMA, "vocab_size": 32000, "ckpt_format": "torch", "use_torch_fsdp2": True})
    # megatron-core's TransformerConfig: biases in experts at expert tensor parallel size 1 only (default: TP)
    with pytest.raises(ArchitectureError, match=r"add_bias_linear \(Megatron-LM's default\) at expert tensor "
                                                r"parallel size 2"):
        TrainingJob.from_megatron_args({**LLAMA, "vocab_size": 32000, "num_experts": 8, "add_bias_linear": True,
                                        "tensor_model_parallel_size": 2})
    assert TrainingJob.from_megatron_args({**LLAMA, "vocab_size": 32000, "num_experts": 8, "add_bias_linear": True,
                                           "tensor_model_parallel_size": 2, "expert_tensor_parallel_size": 1})
    # megatron-core's TransformerConfig: the aux-loss-free expert bias is for sigmoid router scores only
    biased = {**LLAMA, "vocab_size": 32000, "num_experts": 8, "moe_router_enable_expert_bias": True}
    with pytest.raises(ArchitectureError, match="moe_router_score_function 'softmax': megatron-core's expert bias"):
        Architecture.from_megatron_args(biased)
    assert Architecture.from_megatron_args({**biased, "moe_router_score_function": "sigmoid"}).moe.expert_bias


def test_a_job_round_trips_through_its_dict():
    job = TrainingJob.from_megatron_args({**LLAMA, "vocab_size": 32000, "num_experts": 8, "moe_layer_freq": 2,
                                          "multi_latent_attention": True, "q_lora_rank": 64, "mtp_num_layers": 1,
                                          "expert_model_parallel_size": 4})
    assert TrainingJob.from_dict(job.as_dict()) == job
