"""A rank of a real FSDP2 save, for tests/e2e/test_workload_fsdp2.py: the parameters of a Megatron experiment's GPT
(its shapes as `megatron_shapes` gives them, one tensor per parameter) sharded by torch's `fully_shard` over the
ranks on a CPU mesh, saved through DCP. Prints this rank's parameter bytes (its DTensors' local shards) and the bytes
of the file DCP wrote for it, as JSON in rank-N.json beside OUT_DIR.

    python -m torch.distributed.run --nproc-per-node N tests/e2e/fsdp2_save.py ARGS.json OUT_DIR
"""

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from ckpt_bench.layout.megatron_fsdp2 import parameter_groups
from ckpt_bench.layout.megatron_shapes import MegatronGPT
from ckpt_bench.layout.sources import from_megatron_args
from ckpt_bench.layout.workload import TORCH_DTYPE
from ckpt_bench.worker.entry import exit_process


def main(arguments: str, out: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    gpt = MegatronGPT(from_megatron_args("fsdp2", json.loads(arguments), "test"), dist.get_world_size())
    model = torch.nn.Module()
    for index, parameter in enumerate(parameter_groups(gpt.model_shards(gpt.coordinates(0)))):
        rows = sum(shard.local_shape[0] for shard in parameter)
        shape = (rows, *parameter[0].local_shape[1:])
        dtype = getattr(torch, TORCH_DTYPE[parameter[0].dtype])
        model.register_parameter(f"p{index}", torch.nn.Parameter(torch.ones(shape, dtype=dtype)))
    fully_shard(model, mesh=init_device_mesh("cpu", (dist.get_world_size(),)))
    local = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
    dcp.save({"model": model.state_dict()}, checkpoint_id=out)
    dist.barrier()
    written = sum(os.path.getsize(os.path.join(out, name)) for name in os.listdir(out)
                  if name.startswith(f"__{rank}_"))
    # A file a rank, not stdout: the ranks' lines can interleave there.
    with open(os.path.join(os.path.dirname(out), f"rank-{rank}.json"), "w") as result:
        json.dump({"rank": rank, "parameter_bytes": local, "file_bytes": written}, result)
    dist.barrier()
    dist.destroy_process_group()
    exit_process(0)  # the device mesh's groups outlive destroy_process_group: as our ranks end (worker/entry.py)


if __name__ == "__main__":
    main(*sys.argv[1:])
