#!/usr/bin/env bash
# The GPU machine check (the device tool), one call: the default run, a DCP run, MoE --workload subsets (a tiny
# one and DeepSeek-V2-Lite's real share), the real Megatron-LM pretrain_gpt.py (and its refusal without Transformer
# Engine) and the built-in worker's ~1 GB GPT saved async, each on CUDA/NCCL with no change to the code.
# Run from the repository root with the wheels the image lacks in .whl/ (megatron-core, cloup, ahocorasick-rs,
# pydantic and its needs) and the Megatron-LM and Primus snapshots in .gpu/ (carried: .whl, .gpu); STEPS="a b"
# runs only those steps. Every step's JSON report, stderr and run directory go into $OUT/steps.tar.gz;
# $OUT/summary.txt says how each step ended.
set -u
OUT=${OUT:-/tmp/device-check}
mkdir -p "$OUT" /tmp/steps
[ -d .whl ] && { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{ nvidia-smi; python3 -c "import torch; print(torch.__version__, torch.cuda.device_count(), torch.cuda.get_device_name(0))"
  command -v g++ make; nproc; free -g; df -h /tmp; } > "$OUT/env.txt" 2>&1

step() {  # step NAME SECONDS ARGS...: one launch, its JSON report and stderr kept, its status summarised
    local name=$1 limit=$2 start=$SECONDS
    shift 2
    [ -z "${STEPS:-}" ] || [[ " $STEPS " == *" $name "* ]] || return 0  # STEPS="a b": only those steps
    timeout "$limit" python3 ckpt_launch.py --format json --runs-dir "/tmp/steps/$name" "$@" \
        > "/tmp/steps/$name.json" 2> "/tmp/steps/$name.err"
    local rc=$?
    echo "== $name: exit $rc after $((SECONDS - start)) s"
    [ -s "/tmp/steps/$name.json" ] || { echo "no report:"; tail -3 "/tmp/steps/$name.err"; return 0; }
    python3 - "/tmp/steps/$name.json" <<'PY' || tail -5 "/tmp/steps/$name.err"
import json, sys
r = json.load(open(sys.argv[1]))
env = r.get("environment", {})
print("status", r["run"]["status"], "| world", r.get("world_size"), "| verified", r.get("verified"), "|",
      *(f"{k}={env.get(k)}" for k in ("torch", "megatron-core", "cuda_available", "gpu")))
for s in r.get("saves") or []:
    print("  save", s.get("iteration"), "block", s.get("block_time"), "total", s.get("total_time"),
          "bytes", s.get("bytes"), "phases", [(p["phase"], p["seconds"]) for p in s.get("phases") or []])
load = r.get("load") or {}
print("  load", load.get("time"), load.get("cache"), "phases", load.get("phases"))
print("  notes:", *(r.get("notes") or [])[:6], sep="\n    ")
PY
    tar -czf "$OUT/steps.tar.gz" -C /tmp steps  # after each step: what finished comes back if the call runs out
}

{
step default 120
step dcp 120 --backend dcp --model gpt2 --save-calls 3
step workload-moe 120 --workload ckpt_bench/configs/tiny_gpt.yaml --set num_experts=4 --set moe_router_topk=2 \
    --set expert_model_parallel_size=2 --job-ranks 2 --subset --engine torch_dist
mkdir -p /tmp/mlm && tar -xzf .gpu/megatron-lm-core_v0.16.1.tar.gz -C /tmp/mlm
# No Transformer Engine or Apex on this image: Megatron-LM's local layers, and its fusions that need Apex off.
step megatron-lm 200 --framework megatron-lm --megatron-path /tmp/mlm/Megatron-LM \
    --set num_layers=2 --set hidden_size=64 --set ffn_hidden_size=128 --set num_attention_heads=4 \
    --set seq_length=64 --set max_position_embeddings=64 --set vocab_size=1024 --set micro_batch_size=1 \
    --set global_batch_size=2 --train-iters 4 --save-interval 2 --set transformer_impl=local \
    --set gradient_accumulation_fusion=false --set no_persist_layer_norm=true --async-save --use-persistent-ckpt-worker
# One rank's MoE (EP 1, local experts: no fused bias-GELU), to tell megatron-core's own behaviour from the CPU layer's.
step megatron-lm-moe 200 --framework megatron-lm --megatron-path /tmp/mlm/Megatron-LM \
    --set num_layers=2 --set hidden_size=64 --set ffn_hidden_size=128 --set num_attention_heads=4 \
    --set seq_length=64 --set max_position_embeddings=64 --set vocab_size=1024 --set micro_batch_size=1 \
    --set global_batch_size=2 --train-iters 4 --save-interval 2 --set transformer_impl=local \
    --set gradient_accumulation_fusion=false --set no_persist_layer_norm=true --set bias_gelu_fusion=false \
    --set num_experts=4 --set moe_router_topk=2
step megatron-1GB 150 --config configs/gpt_1GB.yaml --async-save
# Without Transformer Engine or Apex, Megatron-LM's defaults: refused before anything starts, one line.
step megatron-lm-defaults 60 --framework megatron-lm --megatron-path /tmp/mlm/Megatron-LM --train-iters 2
# An MoE at its real size: rank 0 of DeepSeek-V2-Lite's 256-rank job (Primus's MI300X experiment), torch_dist.
mkdir -p /tmp/primus && tar -xzf .gpu/primus-fd1eeabb.tar.gz -C /tmp/primus
step workload-dsv2lite 180 --workload /tmp/primus/Primus/examples/megatron/configs/MI300X/deepseek_v2_lite-BF16-pretrain.yaml \
    --primus-path /tmp/primus/Primus --job-ranks 256 --subset --engine torch_dist --save-calls 3 --load-calls 2
} 2>&1 | tee "$OUT/summary.txt"
