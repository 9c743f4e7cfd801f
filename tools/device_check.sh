#!/usr/bin/env bash
# The GPU machine check (the device tool), on the README's path: ckpt-bench installed into the machine's own Python
# from a carried wheelhouse (tools/install.py: offline, its torch kept, no PYTHONPATH), then run from outside the
# checkout, each step on CUDA/NCCL with no change to the code: the default run and the built-in worker's ~1 GB GPT
# saved async on the megatron-core the wheelhouse resolves for the image's Python, a Primus llama3.2 1B --subset whose
# projection must not fall below its host's steady save, the real Megatron-LM's local layers at core_v0.19.0 and
# core_v0.16.1 (and its own defaults: run where the image has Transformer Engine, refused in one line where it has
# not), MoE --workload subsets (a tiny one and DeepSeek-V2-Lite's real share), Primus's own run_pretrain.sh, a DCP run,
# and DeepSeek-V3's first --plan at 128 x 8 on the machine's cores (benchmarks/first_plan.py).
#
# Prepared here, carried as .gpu/ (the machine's Python 3.12 and torch 2.11.0: see the device tool's KINDS.md):
#   make wheelhouse WHEELHOUSE=.gpu/wheelhouse PYTHON_VERSION=3.12 PLATFORM=manylinux_2_28_x86_64 \
#       TORCH_VERSION=2.11.0 [IMAGE_PACKAGES=.gpu/image.txt]
#   cp ../shared/upstream/*.tar.gz .gpu/  (both Megatron-LM tags and Primus)
#   [.gpu/extra/*.whl: what the image lacks for Megatron-LM itself (pydantic, for core_v0.16.1), installed beside]
# IMAGE_PACKAGES, the machine's `pip list --format=freeze` (each run writes it to $OUT/image.txt first; STEPS=freeze only that),
# leaves out of the wheelhouse what the machine has: it then fits the device tool's 64 MiB easily.
# Run from the repository root: tools/device_check.sh; STEPS="a b" runs only those steps. The install's line and the
# machine's stack go to $OUT/env.txt; every step's JSON report, stderr and run directory into $OUT/steps.tar.gz;
# $OUT/summary.txt says how each step ended. The steps before first-plan took 7.5 minutes on the H200 (2026-11-30)
# and the device tool runs a command 10 minutes at most: give first-plan, and a rerun, a call of their own with STEPS.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/device-check}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT" /tmp/steps /tmp/steps-cwd
if [ "${STEPS:-}" = freeze ]; then
    "$PYTHON" -m pip list --format=freeze > "$OUT/image.txt"
    exit
fi
"$PYTHON" -m pip list --format=freeze > "$OUT/image.txt" 2>/dev/null  # the image as found: IMAGE_PACKAGES next time
# The install: the one line tools/install.py prints either way; nothing runs without it.
"$PYTHON" "$REPO/.gpu/wheelhouse/install.py" > "$OUT/env.txt" 2>&1 || { cat "$OUT/env.txt"; exit 1; }
# .gpu/extra/*.whl, where given: what the user's image holds for Megatron-LM itself and this one lacks (core_v0.16.1's
# megatron.training imports pydantic, which megatron-core does not bring; without it the run is refused in one line).
if compgen -G "$REPO/.gpu/extra/*.whl" > /dev/null; then
    "$PYTHON" -m pip install -q --no-index --no-deps "$REPO"/.gpu/extra/*.whl >> "$OUT/env.txt" 2>&1 || exit 1
    echo "image extras: $(cd "$REPO/.gpu/extra" && echo *.whl)" >> "$OUT/env.txt"
fi
export PYTHONUNBUFFERED=1 PRIMUS_CACHE_ROOT=/tmp/primus-cache HF_HOME=/tmp/hf
{ nvidia-smi; "$PYTHON" -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.device_count(), torch.cuda.get_device_name(0))"
  "$PYTHON" -c "import importlib.metadata as m; print('megatron-core', m.version('megatron-core'))"
  command -v g++ make; nproc; free -g; df -h /tmp; } >> "$OUT/env.txt" 2>&1
HAS_TE=$("$PYTHON" -c "import importlib.util; print(int(importlib.util.find_spec('transformer_engine') is not None))")

step() {  # step NAME SECONDS ARGS...: one launch, its JSON report and stderr kept, its status summarised
    local name=$1 limit=$2 start=$SECONDS
    shift 2
    [ -z "${STEPS:-}" ] || [[ " $STEPS " == *" $name "* ]] || return 0  # STEPS="a b": only those steps
    # From outside the checkout: the installed ckpt-bench runs, not this folder's.
    (cd /tmp/steps-cwd && timeout "$limit" "$PYTHON" -m ckpt_bench --format json --runs-dir "/tmp/steps/$name" "$@" \
        > "/tmp/steps/$name.json" 2> "/tmp/steps/$name.err")
    local rc=$?
    echo "== $name: exit $rc after $((SECONDS - start)) s"
    [ -s "/tmp/steps/$name.json" ] || { echo "no report:"; tail -3 "/tmp/steps/$name.err"; return 0; }
    "$PYTHON" - "/tmp/steps/$name.json" <<'PY' || tail -5 "/tmp/steps/$name.err"
import json, sys
r = json.load(open(sys.argv[1]))
env = r.get("environment", {})
print("status", r["run"]["status"], "| world", r.get("world_size"), "| verified", r.get("verified"), "|",
      *(f"{k}={env.get(k)}" for k in ("torch", "cuda", "transformer-engine", "apex", "megatron-core", "gpu")))
for s in r.get("saves") or []:
    print("  save", s.get("iteration"), "block", s.get("block_time"), "total", s.get("total_time"),
          "bytes", s.get("bytes"), "phases", [(p["phase"], p["seconds"]) for p in s.get("phases") or []])
load = r.get("load") or {}
print("  load", load.get("time"), load.get("cache"), "phases", load.get("phases"))
print("  notes:", *(r.get("notes") or [])[:6], sep="\n    ")
projection = r.get("projection") or {}
for key in ("save", "steady_save", "load"):  # the whole job's figures, where the run projects them
    if key in projection:
        p = projection[key]
        print(f"  projected {key}:", p.get("seconds"), "range", p.get("range_s"), "binding", p.get("binding"),
              "floor", (p.get("floor") or {}).get("seconds"))
PY
    tar -czf "$OUT/steps.tar.gz" -C /tmp steps  # after each step: what finished comes back if the call runs out
}

SMALL=(--set num_layers=2 --set hidden_size=64 --set ffn_hidden_size=128 --set num_attention_heads=4
       --set seq_length=64 --set max_position_embeddings=64 --set micro_batch_size=1 --set global_batch_size=2
       --train-iters 4 --save-interval 2)
{
head -1 "$OUT/env.txt"
mkdir -p /tmp/mlm /tmp/mlm19 /tmp/primus
tar -xzf "$REPO/.gpu/megatron-lm-core_v0.16.1.tar.gz" -C /tmp/mlm
tar -xzf "$REPO/.gpu/megatron-lm-core_v0.19.0.tar.gz" -C /tmp/mlm19
tar -xzf "$REPO/.gpu/primus-fd1eeabb.tar.gz" -C /tmp/primus
# First what this round changed: the default run and the async GPT on the megatron-core the wheelhouse resolved for
# the image's Python (3.12: megatron-core 0.19.2), and the busiest host of a real-size subset with the whole job's
# projection, which may never fall below that host's own steady save.
step default 120
step megatron-1GB 150 --config "$REPO/configs/gpt_1GB.yaml" --async-save
step workload-llama1b 180 --workload /tmp/primus/Primus/examples/megatron/configs/MI300X/llama3.2_1B-BF16-pretrain.yaml \
    --primus-path /tmp/primus/Primus --job-ranks 8 --subset --subset-hosts busiest --engine torch_dist \
    --save-calls 4 --load-calls 1
# Megatron-LM's local layers, and its fusions that need Apex off: what runs without Transformer Engine or Apex; at
# core_v0.19.0 (today's) and core_v0.16.1.
LOCAL=(--set vocab_size=1024 --set transformer_impl=local --set gradient_accumulation_fusion=false
       --set no_persist_layer_norm=true)
step megatron-lm-019 200 --framework megatron-lm --megatron-path /tmp/mlm19/Megatron-LM "${SMALL[@]}" "${LOCAL[@]}" \
    --async-save --use-persistent-ckpt-worker
step megatron-lm 200 --framework megatron-lm --megatron-path /tmp/mlm/Megatron-LM "${SMALL[@]}" "${LOCAL[@]}" \
    --async-save --use-persistent-ckpt-worker
# An MoE at its real size: rank 0 of DeepSeek-V2-Lite's 256-rank job (Primus's MI300X experiment), torch_dist.
step workload-dsv2lite 180 --workload /tmp/primus/Primus/examples/megatron/configs/MI300X/deepseek_v2_lite-BF16-pretrain.yaml \
    --primus-path /tmp/primus/Primus --job-ranks 256 --subset --engine torch_dist --save-calls 3 --load-calls 2
# Primus's own trainer through its examples/run_pretrain.sh (docs/megatron.md says where the snapshot stops).
step primus 200 --framework primus --primus-path /tmp/primus/Primus \
    --config /tmp/primus/Primus/examples/megatron/configs/MI300X/llama2_7B-BF16-pretrain.yaml "${SMALL[@]}"
step dcp 120 --backend dcp --model gpt2 --save-calls 3
step workload-moe 120 --workload "$REPO/ckpt_bench/configs/tiny_gpt.yaml" --set num_experts=4 --set moe_router_topk=2 \
    --set expert_model_parallel_size=2 --job-ranks 2 --subset --engine torch_dist
# One rank's MoE (EP 1, local experts: no fused bias-GELU) through Megatron-LM: refused up front without TE where
# the checkout's router needs it (core_v0.16.1).
step megatron-lm-moe 200 --framework megatron-lm --megatron-path /tmp/mlm/Megatron-LM "${SMALL[@]}" "${LOCAL[@]}" \
    --set bias_gelu_fusion=false --set num_experts=4 --set moe_router_topk=2
# Megatron-LM with its own defaults (Transformer Engine's layers, Apex's fusions where the image has Apex): run where
# the image has Transformer Engine; without it, refused before anything starts, in one line.
if [ "$HAS_TE" = 1 ]; then
    step megatron-lm-defaults 240 --framework megatron-lm --megatron-path /tmp/mlm/Megatron-LM "${SMALL[@]}" \
        --set vocab_size=1024
else
    step megatron-lm-defaults 60 --framework megatron-lm --megatron-path /tmp/mlm/Megatron-LM --train-iters 2
fi
# The first --plan of DeepSeek-V3 at 128 x 8 on this host's cores (benchmarks/first_plan.py; issue 44's goal is 60 s
# on a 2-core machine): wall, peak memory and the figures, beside the same on the development machine.
if [ -z "${STEPS:-}" ] || [[ " $STEPS " == *" first-plan "* ]]; then
    echo "== first-plan"
    (cd /tmp && timeout "${PLAN_TIMEOUT:-240}" "$PYTHON" "$REPO/benchmarks/first_plan.py" /tmp/primus MI300X/deepseek_v3-BF16-pretrain.yaml \
        > /tmp/steps/first-plan.out 2>&1; echo "exit $? (124: stopped at ${PLAN_TIMEOUT:-240} s)"; tail -3 /tmp/steps/first-plan.out)
fi
} 2>&1 | tee "$OUT/summary.txt"
