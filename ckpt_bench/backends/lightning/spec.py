"""The Lightning worker's input: `worker.json`, written by the launcher.

    {
      "lightning": {
        "strategy": "ddp" | "fsdp",
        "accelerator": "cpu" | "gpu",
        "dist_backend": "gloo" | "nccl",
        "num_layers": 4, "save_calls": 3, "load_calls": 3,
        "named_model": null | "vit-base-in21k",  # a DCP backend model shape instead of the demo Transformer
        "steps_per_save": null | N,       # save during fit every N steps (and time fit without saves)
        "async_save": false,
        "train_steps": 2,                 # steps trained before the save calls (not in fit mode); 0: none
        "seed": 1234,
        "model": {"vocab_size": 33278, "ninp": 200, "nhid": 200, "nhead": 2,
                  "block_size": 35, "batch_size": 1},
        "storage": {"storage": "disk" | "s3" | "fsspec", ...}   # ckpt_bench.storage's describe()
      },
      "checkpoint_dir": "/abs/ckpts/run" | "s3://bucket/prefix/run",
      "events_dir": ..., "integrity_dir": ..., "run_dir": ..., "warm_load": false
    }

Save call K (1..N) writes `<checkpoint_dir>/iter_000000K/`: a single `checkpoint.ckpt` for DDP (what
`trainer.save_checkpoint` writes through the CheckpointIO), the sharded DCP files for FSDP2. One
folder per call, named like Megatron's, so folder sizes are measured the same way for every backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ckpt_bench.core.worker_spec import WorkerSpec
from ckpt_bench.storage import LocalStorage

CHECKPOINT_FILE = "checkpoint.ckpt"
# What each --strategy runs (ckpt_bench.backends.lightning.training builds them), named in the report.
STRATEGY_CLASSES = {"ddp": "DDPStrategy", "fsdp": "ModelParallelStrategy+fully_shard (FSDP2)"}

MODEL_DEFAULTS = {
    "vocab_size": 33278,  # WikiText2's, which Lightning's demo and dataflux's benchmark use
    "ninp": 200,
    "nhid": 200,
    "nhead": 2,
    "block_size": 35,
    "batch_size": 1,
}



def parameter_count(num_layers: int, vocab_size: int, ninp: int, nhid: int, **_) -> int:
    """Parameters of Lightning's demo Transformer (`lightning.pytorch.demos.Transformer`): the embedding, an
    `nn.Transformer` of `num_layers` encoder and decoder layers, and the output projection. Counted here rather
    than on the model, so that planning a run imports neither torch nor Lightning (tests compare the two)."""
    d, hidden = ninp, nhid
    attention = 4 * d * d + 4 * d  # in_proj (q, k, v) and out_proj, each with its bias
    feed_forward = 2 * d * hidden + hidden + d
    encoder_layer = attention + feed_forward + 2 * 2 * d  # two LayerNorms
    decoder_layer = 2 * attention + feed_forward + 3 * 2 * d  # self- and cross-attention, three LayerNorms
    norms = 2 * 2 * d  # the encoder's and the decoder's final LayerNorm
    return vocab_size * d + num_layers * (encoder_layer + decoder_layer) + norms + d * vocab_size + vocab_size

@dataclass(kw_only=True)
class LightningSpec(WorkerSpec):
    """What every rank of a Lightning run trains, saves and loads: built by the launcher, read by the ranks."""

    section: ClassVar[str] = "lightning"

    strategy: str
    accelerator: str
    dist_backend: str
    num_layers: int
    save_calls: int
    load_calls: int
    async_save: bool
    steps_per_save: int | None = None
    named_model: str | None = None
    train_steps: int = 2
    seed: int = 1234
    model: dict = field(default_factory=lambda: dict(MODEL_DEFAULTS))
    storage: dict = field(default_factory=lambda: {"storage": LocalStorage.kind})

    def checkpoint_path(self, iteration: int) -> str:
        """What `trainer.save_checkpoint` is given: the file (DDP) or the DCP folder (FSDP2)."""
        folder = self.iteration_dir(iteration)
        return folder if self.strategy == "fsdp" else f"{folder}/{CHECKPOINT_FILE}"
