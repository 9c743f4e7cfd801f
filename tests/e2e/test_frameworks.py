"""--framework primus against a checkout whose launcher script is a fake that records what it was given and
writes logs in Primus's own format; the report is built from those logs. The real Megatron-LM runs in
test_real_megatron_lm.py."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml
from helpers import ROOT

# What the fake does once it knows its arguments: record them, "save" (iteration folders) or "load",
# and print Megatron's checkpoint messages, the way the real framework would.
FAKE = textwrap.dedent('''
    import json, os, sys, time
    from datetime import datetime
    from pathlib import Path

    def stamp():
        return datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")

    def train(save, load, train_iters, interval, fmt, say):
        if load:
            say(f" loading distributed checkpoint from {load} at iteration {train_iters}")
            time.sleep(0.05)
            say(f"  successfully loaded checkpoint from {load} [ t 1/1, p 1/1 ] at iteration {train_iters}")
            say("(min, max) time across ranks (ms):\\n    load-checkpoint ........: (50.00, 50.00)")
            return
        for it in range(interval, train_iters + 1, interval):
            say(f"[{stamp()}] saving checkpoint at iteration {it:7d} to {save} in {fmt} format")
            folder = Path(save) / f"iter_{it:07d}"
            folder.mkdir(parents=True)
            (folder / "__0_0.distcp").write_bytes(b"x" * 4096)
            (Path(save) / "latest_checkpointed_iteration.txt").write_text(str(it))
            say(f"  [{stamp()}] successfully saved checkpoint from iteration {it:7d} to {save} [ t 1/1, p 1/1 ]")
''')

PRIMUS_FAKE = FAKE + textwrap.dedent('''
    import yaml
    exp = yaml.safe_load(open(os.environ["EXP"]))
    args = exp["modules"]["pre_trainer"]["overrides"]
    root = Path(exp["workspace"], exp["work_group"], exp["user_name"], exp["exp_name"])
    phase = "load" if args.get("load") else "save"
    keys = ("EXP", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "GPUS_PER_NODE", "PRIMUS_SKIP_PIP")
    Path(os.environ["FAKE_RECORD"], f"{phase}.json").write_text(json.dumps(
        {"env": {k: os.environ.get(k) for k in keys}, "cwd": os.getcwd(), "exp": exp}))
    log = root / "logs" / "pre_trainer" / "rank-0" / "debug.log"
    log.parent.mkdir(parents=True)
    with open(log, "w") as out:
        def say(message):
            prefix = datetime.now().strftime("[%Y%m%d %H:%M:%S]") + "[user/team][pre_trainer][rank-0/1][DEBUG]"
            first, *rest = message.strip().splitlines()
            out.write(f"{prefix}    [----checkpointing.py:512] : {first}\\n" + "".join(r + "\\n" for r in rest))
        train(args.get("save"), args.get("load"), args["train_iters"], args["save_interval"], args["ckpt_format"], say)
''')


def run(tmp_path, *args):
    record = tmp_path / "record"
    record.mkdir()
    result = subprocess.run(
        [sys.executable, str(ROOT / "ckpt_launch.py"), "--nproc-per-node", "1", "--runs-dir", str(tmp_path / "runs"),
         "--keep-checkpoints", *args],
        capture_output=True, text=True, timeout=180, cwd=ROOT,
        env={**os.environ, "FAKE_RECORD": str(record), "FAKE_PYTHON": sys.executable},
    )
    assert result.returncode == 0, result.stderr
    recorded = {p.stem: json.loads(p.read_text()) for p in record.glob("*.json")}
    return json.loads(result.stdout), recorded


def assert_report(report, framework):
    assert report["run"]["status"] == "ok" and report["config"]["backend"] == framework
    assert report["num_saved"] == 3 and [s["iteration"] for s in report["saves"]] == [2, 4, 6]
    assert report["iter_folder_size"] == 4096 and report["saves"][-1]["bytes_source"] == "disk"
    assert report["load"]["iteration"] == 6 and report["load_time"] == 0.05
    assert report["world_size"] == 1 and report["ckpt_format"] == "torch_dist"


TINY_PRIMUS_EXPERIMENT = """
work_group: ${PRIMUS_TEAM:amd}
user_name: ${PRIMUS_USER:root}
exp_name: tiny_llama
workspace: ./output
modules:
  pre_trainer:
    framework: megatron
    config: pre_trainer.yaml
    model: llama2_7B.yaml
    overrides:
      num_layers: 2
      hidden_size: 64
      ffn_hidden_size: 128
      num_attention_heads: 4
      seq_length: 64
      max_position_embeddings: 64
      micro_batch_size: 1
      global_batch_size: 1
      vocab_size: 1024
      ckpt_format: torch_dist
"""


def primus_checkout(tmp_path: Path, upstream_primus: Path, run_pretrain: str) -> tuple[Path, Path]:
    """A Primus checkout with the snapshot's real presets and `run_pretrain` as its launcher script, and the tiny
    experiment beside it."""
    primus = tmp_path / "Primus"
    shutil.copytree(upstream_primus / "primus" / "configs", primus / "primus" / "configs")
    (primus / "examples").mkdir(parents=True)
    (primus / "examples" / "run_pretrain.sh").write_text(run_pretrain)
    experiment = tmp_path / "tiny_llama.yaml"
    experiment.write_text(TINY_PRIMUS_EXPERIMENT)
    return primus, experiment


def test_primus(tmp_path, upstream_primus):
    """Primus's real presets (its checkout's primus/configs), its launcher script faked: what we write for it."""
    primus, experiment = primus_checkout(tmp_path, upstream_primus, 'exec "$FAKE_PYTHON" "$(dirname "$0")/fake.py"\n')
    (primus / "examples" / "fake.py").write_text(PRIMUS_FAKE)
    report, recorded = run(tmp_path, "--framework", "primus", "--primus-path", str(primus), "--master-port", "29555",
                           "--config", experiment, "--train-iters", "6", "--save-interval", "2")
    assert_report(report, "primus")
    run_dir = Path(report["run"]["dir"])
    save, load = recorded["save"], recorded["load"]
    assert save["env"] == {"EXP": str(run_dir / "primus" / "save.yaml"), "NNODES": "1", "NODE_RANK": "0",
                           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555", "GPUS_PER_NODE": "1",
                           "PRIMUS_SKIP_PIP": "1"}  # the script would pip-install Primus's requirements otherwise
    assert save["cwd"] == str(primus)
    resolved = yaml.safe_load((run_dir / "primus" / "save.yaml").read_text())
    module = resolved["modules"]["pre_trainer"]
    assert module["model"] == "llama2_7B.yaml" and module["config"] == "pre_trainer.yaml"  # Primus finds its own
    overrides = module["overrides"]
    assert overrides["save"] == report["save"] and overrides["load"] is None  # a real save path
    # The experiment's own overrides and what our options changed, never what Primus's presets give anyway.
    assert overrides["hidden_size"] == 64 and overrides["train_iters"] == 6 and overrides["mock_data"] is True
    assert "lr" not in overrides and "seed" not in overrides and "normalization" not in overrides
    load_overrides = load["exp"]["modules"]["pre_trainer"]["overrides"]
    assert load_overrides["load"] == report["save"] and load_overrides["save"] is None
    exp_root = run_dir / "primus" / "save" / "amd" / "root" / "tiny_llama"
    assert (exp_root / "logs" / "pre_trainer").is_dir()
    # Primus saves to <exp_root>/checkpoints whatever `save` says: that is the run's checkpoint folder.
    assert os.readlink(exp_root / "checkpoints") == report["save"]


def test_primus_needs_an_experiment_primus_can_read(tmp_path, upstream_primus):
    result = subprocess.run([sys.executable, str(ROOT / "ckpt_launch.py"), "--framework", "primus", "--primus-path",
                             str(upstream_primus), "--plan"], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2 and "names ckpt-bench's own presets" in result.stderr


def test_a_primus_launcher_that_stops_before_training_says_why(tmp_path, upstream_primus):
    """The Primus snapshot's run_pretrain.sh stops at its missing examples/scripts/prepare_experiment.py (seen on
    the GPU machine too): its own last lines on stderr, and a report that says no log of Primus's was found."""
    primus, experiment = primus_checkout(
        tmp_path, upstream_primus,
        'echo "[NODE-0(vm)] [ERROR] $(dirname "$0")/scripts/prepare_experiment.py failed, aborting."\nexit 1\n')
    result = subprocess.run(
        [sys.executable, str(ROOT / "ckpt_launch.py"), "--nproc-per-node", "1", "--runs-dir", str(tmp_path / "runs"),
         "--framework", "primus", "--primus-path", str(primus), "--config", str(experiment), "--format", "json"],
        capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert result.returncode == 1
    assert "[save] pass failed with exit code 1; logs in " in result.stderr
    assert (f"last lines of its console:\n[NODE-0(vm)] [ERROR] {primus}/examples/scripts/prepare_experiment.py "
            "failed, aborting.") in result.stderr
    report = json.loads(result.stdout)
    assert report["run"]["status"] == "failed"
    assert (f"no log of the framework's found to read checkpoint events from: each pass's console.log under "
            f"{report['run']['dir']}/logs holds what it printed") in report["notes"]
