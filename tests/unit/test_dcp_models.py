"""DCP model shapes: parameter counts match the published ones, built from architecture alone."""

import pytest

from bench.dcp import models


def test_model_shapes_match_published_sizes():
    expected = {"vit-base": 86.6e6, "gpt2": 124.4e6, "T0_3B": 2.85e9, "llama2-7b": 6.74e9, "llama2-13b": 13.0e9}
    for name, count in expected.items():
        assert models.parameter_count(name) == pytest.approx(count, rel=0.005), name
    assert models.estimate_bytes("llama2-7b", "bf16") == 2 * models.parameter_count("llama2-7b")
