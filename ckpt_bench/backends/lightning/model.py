"""The benchmark's LightningModule: Lightning's demo Transformer on synthetic tokens.

dataflux's checkpoint benchmark sizes its model by the number of layers of this same demo
Transformer, so `--num-layers` means the same thing here. WikiText2 would have to be downloaded, so
the tokens are synthetic (deterministic per sample index); the data do not matter to a checkpoint,
only the shapes do. The optimizer is Adam rather than the demo's plain SGD: SGD keeps no state, and a
checkpoint without optimizer state is not what training jobs write.

`NamedShapes` is the other model: a named checkpoint shape of `ckpt_bench.backends.dcp.models` (`--model`), as
s3torchbenchmarking's Lightning benchmark saves a Hugging Face model. It has the model's parameter
names and shapes and seeded random values; its "training step" touches every parameter so that a
run with training steps gets Adam state for all of them.
"""

from __future__ import annotations

import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.demos import Transformer
from lightning.pytorch.demos.transformer import LightningTransformer
from torch.utils.data import DataLoader, Dataset

from ckpt_bench.backends.dcp import models


class SyntheticTokens(Dataset):
    """`length` samples of `block_size` random tokens and the same shifted by one (next-token targets)."""

    def __init__(self, vocab_size: int, block_size: int, length: int):
        self.vocab_size = vocab_size
        self.block_size = block_size
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(index)
        tokens = torch.randint(self.vocab_size, (self.block_size + 1,), generator=generator)
        return tokens[:-1], tokens[1:]


class BenchTransformer(LightningTransformer):
    """The demo LightningTransformer with its size set by `num_layers`, synthetic data, Adam, and
    FSDP2 sharding when the strategy gives it a device mesh (ModelParallelStrategy)."""

    def __init__(self, num_layers: int, vocab_size: int, ninp: int, nhid: int, nhead: int,
                 block_size: int, batch_size: int, samples: int):
        super().__init__(vocab_size=vocab_size)
        self.model = Transformer(vocab_size=vocab_size, ninp=ninp, nhead=nhead, nhid=nhid, nlayers=num_layers)
        self.block_size = block_size
        self.batch_size = batch_size
        self.samples = samples

    def prepare_data(self) -> None:
        """The demo downloads WikiText2 here; synthetic tokens need nothing."""

    def train_dataloader(self) -> DataLoader:
        return DataLoader(SyntheticTokens(self.model.vocab_size, self.block_size, self.samples),
                          batch_size=self.batch_size)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3)

    def configure_model(self) -> None:
        """FSDP2: shard every encoder and decoder layer, then the rest, over the data-parallel mesh.

        Called by every strategy; only ModelParallelStrategy has a device mesh."""
        mesh = getattr(self, "device_mesh", None)
        if mesh is None:
            return
        from torch.distributed.fsdp import fully_shard

        data_parallel = mesh["data_parallel"]
        for layer in (*self.model.transformer.encoder.layers, *self.model.transformer.decoder.layers):
            fully_shard(layer, mesh=data_parallel)
        fully_shard(self.model, mesh=data_parallel)


class NamedShapes(LightningModule):
    """A named model's parameters (names and shapes as its Hugging Face state dict has them, under
    `model.`), seeded random values, Adam; FSDP2 shards it as one unit."""

    def __init__(self, name: str, samples: int, seed: int):
        super().__init__()
        self.model = torch.nn.Module()
        generator = torch.Generator().manual_seed(seed)
        for dotted, shape in models.architecture(name).tensors():
            *path, leaf = dotted.split(".")
            owner = self.model
            for part in path:
                if not hasattr(owner, part):
                    owner.add_module(part, torch.nn.Module())
                owner = getattr(owner, part)
            owner.register_parameter(leaf, torch.nn.Parameter(torch.randn(shape, generator=generator)))
        self.samples = samples

    def train_dataloader(self) -> DataLoader:
        return DataLoader(torch.zeros(self.samples, 1), batch_size=1)

    def training_step(self, batch, batch_idx) -> torch.Tensor:
        """A loss that reaches every parameter (so the optimizer keeps state for each)."""
        return sum(parameter.square().mean() for parameter in self.parameters())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3)

    def configure_model(self) -> None:
        mesh = getattr(self, "device_mesh", None)
        if mesh is None:
            return
        from torch.distributed.fsdp import fully_shard

        fully_shard(self.model, mesh=mesh["data_parallel"])
