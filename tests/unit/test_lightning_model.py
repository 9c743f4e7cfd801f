"""The Lightning demo Transformer's parameter count the launcher plans with, against the model itself."""

import pytest
import torch

from ckpt_bench.backends.lightning.spec import MODEL_DEFAULTS, parameter_count


@pytest.mark.parametrize("layers,sizes", [(2, {}), (1, {"ninp": 64, "nhid": 96, "nhead": 4, "vocab_size": 1000}),
                                          (5, {"ninp": 32, "nhid": 256, "nhead": 2, "vocab_size": 7})])
def test_the_planned_count_is_the_demo_models(layers, sizes):
    from lightning.pytorch.demos import Transformer

    model = {**MODEL_DEFAULTS, **sizes}
    with torch.device("meta"):
        demo = Transformer(vocab_size=model["vocab_size"], ninp=model["ninp"], nhead=model["nhead"],
                           nhid=model["nhid"], nlayers=layers)
    assert parameter_count(layers, **model) == sum(p.numel() for p in demo.parameters())
