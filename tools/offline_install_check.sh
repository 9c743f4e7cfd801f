#!/usr/bin/env bash
# The install into an image's Python, end to end, on this machine: a fresh environment that has only a torch (the
# stand-in for an image), `make wheelhouse` into a shared dir for that environment's packages (its pip freeze,
# as IMAGE_PACKAGES: fsspec among them, whose http extra lightning asks for), then with no network at all (a
# network namespace with loopback only): tools/install.py from that wheelhouse, the default run, a
# `--workload --subset` run, and the node command of an emitted Slurm job, run as a node would run it. Checks
# that the torch is the same file before and after, and that each run verified.
#
#     flock /tmp/ckpt-heavy.lock tools/offline_install_check.sh [WORK_DIR]
#
# WORK_DIR (default /tmp/ckpt-bench-offline-check) keeps the torch-only environment between calls (`fresh/`,
# ~900 MB, minutes to make; remove it to start from nothing); what else the check writes there is replaced each
# time. Needs root for the network namespace (unshare -n). Prints one line a step and exits non-zero at the first
# step that fails. Slow (a torch install, three runs): a tool, not a test; tests/unit/test_install.py is the cheap
# part of it that the suite runs.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${1:-/tmp/ckpt-bench-offline-check}
TORCH=$(sed -n 's/^torch==//p' "$ROOT/constraints.txt")
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
step() { echo "== $*"; }

if [ ! -x "$WORK/fresh/bin/python" ]; then
    step "a fresh environment with torch $TORCH only"
    python3 -m venv "$WORK/fresh.new"
    "$WORK/fresh.new/bin/python" -m pip install -q "torch==$TORCH"
    mv "$WORK/fresh.new" "$WORK/fresh"
else  # what a previous check added goes, so the environment has only torch again
    "$WORK/fresh/bin/python" -m pip freeze --exclude-editable > "$WORK/now.txt"
    grep -vxFf "$WORK/torch-only.txt" "$WORK/now.txt" | sed 's/[=@ ].*//' > "$WORK/added.txt" || true
    [ -s "$WORK/added.txt" ] && "$WORK/fresh/bin/python" -m pip uninstall -q -y -r "$WORK/added.txt"
fi
PY="$WORK/fresh/bin/python"
[ -f "$WORK/torch-only.txt" ] || "$PY" -m pip freeze > "$WORK/torch-only.txt"
TORCH_FILE=$("$PY" -c 'import importlib.util; print(importlib.util.find_spec("torch").origin)')
torch_sum() { sha256sum "$TORCH_FILE" "$(dirname "$TORCH_FILE")/lib/libtorch_cpu.so" | sha256sum; }
BEFORE=$(torch_sum)

SHARED="$WORK/shared"
rm -rf "$SHARED"
mkdir -p "$SHARED"
step "make wheelhouse (with the package index), for the image's packages (its pip freeze: torch, and fsspec and the
rest torch brings)"
make -s -C "$ROOT" wheelhouse WHEELHOUSE="$SHARED/wheelhouse" IMAGE_PACKAGES="$WORK/torch-only.txt"

# From here on: no network, loopback only, and none of this machine's pip configuration (its find-links holds a
# torch wheel): only the wheelhouse.
offline() {
    unshare -n env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_INDEX_URL PIP_CONFIG_FILE=/dev/null \
        PYTHONNOUSERSITE=1 bash -c 'ip link set lo up && exec "$@"' offline "$@"
}
verified() {  # verified NAME REPORT: the report's run status and verification
    "$PY" - "$1" "$2" <<'PY'
import json, sys
name, path = sys.argv[1:]
try:
    r = json.load(open(path))
except ValueError:
    sys.exit(f"   {name}: no report")
env = r["environment"]
print(f"   {name}: status {r['run']['status']}, verified {r.get('verified')}, torch {env['torch']}, "
      f"megatron-core {env['megatron-core']}, cuda {env['cuda']}, transformer-engine {env['transformer-engine']}")
sys.exit(0 if r["run"]["status"] == "ok" and r.get("verified") else 1)
PY
}

step "install from the wheelhouse, offline"
offline "$PY" "$SHARED/wheelhouse/install.py"
[ "$(torch_sum)" = "$BEFORE" ] || { echo "torch changed"; exit 1; }

RUNS="$WORK/runs"
rm -rf "$RUNS"
cd "$WORK"  # not the checkout: the installed package runs
step "the default run, offline"
offline "$PY" -m ckpt_bench --runs-dir "$RUNS" --format json > default.json 2> default.err || { tail -3 default.err; }
verified default default.json

step "a --workload --subset run, offline"
WORKLOAD=(--workload "$ROOT/ckpt_bench/configs/tiny_gpt.yaml" --job-ranks 4 --subset --nproc-per-node 2 --save-calls 2
          --load-calls 1)  # the tiny GPT's experiment as a 4-rank job, its first 2 ranks run
offline "$PY" -m ckpt_bench "${WORKLOAD[@]}" --runs-dir "$RUNS" --format json > workload.json 2> workload.err ||
    tail -3 workload.err
verified workload workload.json

step "an emitted Slurm job's node command, run here as node 0 of 1"
cp "$ROOT/ckpt_bench/configs/tiny_gpt.yaml" "$SHARED/"  # what a job reads lies on the shared storage, as --emit asks
WORKLOAD[1]="$SHARED/tiny_gpt.yaml"
"$ROOT/.venv/bin/python" "$ROOT/ckpt_launch.py" "${WORKLOAD[@]}" --format json --emit slurm --shared-dir "$SHARED" \
    --container-image nvcr.io/nvidia/pytorch:25.01-py3 > job.sbatch
NODE=$("$PY" -c 'import shlex, sys; print(shlex.split([l for l in open(sys.argv[1]) if "bash -c" in l][-1])[2])' job.sbatch)
offline env PATH="$WORK/fresh/bin:$PATH" SLURM_NNODES=1 SLURM_NODEID=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29577 \
    SLURM_JOB_ID=offline-check bash -c "$NODE" > node.json 2> node.err || tail -3 node.err
verified node node.json
[ "$(torch_sum)" = "$BEFORE" ] || { echo "torch changed"; exit 1; }
echo "ok: torch $TORCH untouched; installed, ran, and ran an emitted node command with no network"
