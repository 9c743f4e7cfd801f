"""DCP model shapes: parameter counts match the published ones, built from architecture alone."""

import pytest

from ckpt_bench.backends.dcp import models


def test_model_shapes_match_published_sizes():
    expected = {"vit-base": 86.6e6, "gpt2": 124.4e6, "T0_3B": 2.85e9, "llama2-7b": 6.74e9, "llama2-13b": 13.0e9}
    for name, count in expected.items():
        assert models.parameter_count(name) == pytest.approx(count, rel=0.005), name
    assert models.estimate_bytes("llama2-7b", "bf16") == 2 * models.parameter_count("llama2-7b")


# s3torchbenchmarking's models, counted there with transformers on a meta device (models.py at
# awslabs/s3-connector-for-pytorch@611b0ff): sum of `numel()` over `model.parameters()`.
S3TORCHBENCHMARKING_COUNTS = {
    "vit-base-in21k": 86_389_248,  # its `vit-base`: ViTModel (pooler, no classifier)
    "clip-vit": 427_616_513,
    "whisper": 1_543_490_560,  # proj_out is tied to the token embedding: counted once
    "T0_3B": 2_849_757_184,
    "T0pp": 11_135_332_352,
    "L7b": 6_889_410_560,
    "L13b": 13_204_608_000,
    "L30b": 32_774_310_400,
    "L65b": 65_587_650_560,
    "L70b": 69_278_638_080,
}


@pytest.mark.parametrize("name,count", S3TORCHBENCHMARKING_COUNTS.items())
def test_s3torchbenchmarking_models_have_its_exact_counts(name, count):
    assert models.parameter_count(name) == count


def test_both_vit_heads_keep_their_names():
    """Our `vit-base` is the classifier (0.2 % larger than s3torchbenchmarking's `vit-base`)."""
    classifier = dict(models.architecture("vit-base").tensors())
    bare = dict(models.architecture("vit-base-in21k").tensors())
    assert "classifier.weight" in classifier and "vit.embeddings.cls_token" in classifier
    assert "pooler.dense.weight" in bare and "embeddings.cls_token" in bare and "classifier.weight" not in bare
    assert models.parameter_count("vit-base") / models.parameter_count("vit-base-in21k") == pytest.approx(1.002,
                                                                                                          abs=5e-4)
