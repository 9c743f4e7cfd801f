"""A DLIO workload YAML (the files under DLIO's ``configs/workload/``) read into a `Workload`: the keys DLIO
reads for a checkpoint-only run, the ones it reads for anything else (accepted, ignored), the ones refused."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ckpt_bench.layout.workload import Workload, WorkloadError, is_int

__all__ = ["load_dlio_yaml"]

# Keys whose values make the Workload, by dotted path -> Workload field.
_READ: dict[str, str] = {
    "model.name": "name",
    "model.type": "model_type",
    "model.num_layers": "num_layers",
    "model.model_datatype": "model_datatype",
    "model.optimizer_datatype": "optimizer_datatype",
    "model.model_size_bytes": "model_size_bytes",
    "model.parallelism.tensor": "tensor_parallelism",
    "model.parallelism.pipeline": "pipeline_parallelism",
    "model.parallelism.zero_stage": "zero_stage",
    "model.transformer.vocab_size": "vocab_size",
    "model.transformer.hidden_size": "hidden_size",
    "model.transformer.ffn_hidden_size": "ffn_hidden_size",
    "model.transformer.num_attention_heads": "num_attention_heads",
    "model.transformer.num_kv_heads": "num_kv_heads",
    "checkpoint.checkpoint_folder": "checkpoint_folder",
    "checkpoint.num_checkpoints_write": "num_checkpoints_write",
    "checkpoint.num_checkpoints_read": "num_checkpoints_read",
    "checkpoint.time_between_checkpoints": "time_between_checkpoints",
    "checkpoint.fsync": "fsync",
    "checkpoint.rank_sync": "rank_sync",
    "checkpoint.randomize_tensor": "randomize_tensor",
}

# Keys read and checked but not stored as such: the mode they select is the only one ckpt-bench reproduces.
_CHECKED = (
    "framework",  # must be pytorch (DLIO's default is tensorflow: a different checkpoint engine)
    "workflow.checkpoint",  # must be true
    "workflow.train",  # must be false: DLIO's default true trains on data and checkpoints per epoch instead
    "model.parallelism.data",  # subset mode's data-parallel size -> world_size
    "checkpoint.mode",  # default | subset
    "storage.storage_type",  # local_fs only (s3 switches DLIO to its S3 checkpoint engine)
)

# Keys DLIO reads that change neither what a checkpoint-only run writes nor when it is timed: accepted and
# ignored. Data loading, training and evaluation (DLIO skips them when workflow.train is false), outputs,
# profiling, the training-loop checkpoint cadence, KSM page merging (host memory only), ``checkpoint.type``
# (read, used nowhere) and ``checkpoint.recovery_rank_shift`` (DLIO stores it under a misspelt attribute, so
# it never takes effect).
_IGNORED_SECTIONS = {
    "dataset": (
        "record_length_bytes record_length_bytes_stdev record_length_bytes_resize num_files_train num_files_eval"
        " generation_buffer_size num_samples_per_file data_folder num_subfolders_train num_subfolders_eval"
        " enable_chunking chunk_size compression compression_level file_prefix format keep_files"
        " record_element_bytes record_element_type record_dims hdf5.chunk_dims hdf5.num_dset_per_record"
        " hdf5.max_shape"
    ),
    "reader": (
        "dont_use_mmap reader_classname multiprocessing_context data_loader data_loader_classname"
        " data_loader_sampler read_threads computation_threads batch_size batch_size_eval prefetch_size"
        " file_shuffle file_access shuffle_size sample_shuffle read_type transfer_size odirect preprocess_time"
        " preprocess_time_stdev pin_memory transformed_record_dims transformed_record_element_type"
    ),
    "train": "epochs total_training_steps seed_change_epoch computation_time computation_time_stdev seed",
    "evaluation": "eval_time eval_time_stdev eval_after_epoch epochs_between_evals",
    "output": "folder log_file metric.exclude_start_steps metric.exclude_end_steps",
    "profiling": "profiler iostat_devices",
    "metric": "au",
    "workflow": "generate_data evaluation profiling",
    "storage": "storage_root storage_options",
    "checkpoint": (
        "checkpoint_after_epoch epochs_between_checkpoints steps_between_checkpoints type recovery_rank_shift"
        " ksm ksm.madv_mergeable_id ksm.high_ram_trigger ksm.low_ram_exit ksm.await_time"
    ),
}
_IGNORED: set[str] = {f"{section}.{key}" for section, keys in _IGNORED_SECTIONS.items() for key in keys.split()}
_IGNORED |= {f"data_reader.{key}" for key in _IGNORED_SECTIONS["reader"].split()}
# Values that may be mappings of their own (distributions, options): taken whole.
_OPAQUE = {
    "train.computation_time",
    "reader.preprocess_time",
    "data_reader.preprocess_time",
    "evaluation.eval_time",
    "storage.storage_options",
    "checkpoint.time_between_checkpoints",
}

# Keys DLIO reads that ckpt-bench refuses, with the reason.
_REFUSED: dict[str, str] = {
    "model.layer_parameters": "DLIO's legacy fixed layer sizes: every layer then shares one dict of int8 tensors,"
    " which torch.save writes once per file; not reproduced, use model.transformer.*",
    "model.optimization_groups": "DLIO's legacy fixed optimizer groups (int8 'a'/'b' pairs and a 'combined'"
    " tensor); not reproduced, use model.transformer.*",
    "checkpoint.checkpoint_mechanism_classname": "a custom DLIO checkpointing class writes whatever it wants;"
    " only DLIO's own torch.save engine is reproduced",
}

_KNOWN_SECTIONS = ("model", "framework", "workflow", "checkpoint", "storage", *_IGNORED_SECTIONS, "data_reader")


def _flatten(node: Mapping[str, Any], prefix: str, out: dict[str, Any], where: str) -> None:
    for key, value in node.items():
        if not isinstance(key, str):
            raise WorkloadError(f"{where}: key {key!r} under {prefix or 'the top level'} is not a string")
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and path not in _OPAQUE:
            _flatten(value, f"{path}.", out, where)
        else:
            out[path] = value


def _readable_keys(section: str) -> list[str]:
    known = [*_READ, *_CHECKED, *_IGNORED]
    return sorted(k for k in known if k == section or k.startswith(f"{section}."))


def load_dlio_yaml(path: str | Path, *, world_size: int | None = None) -> Workload:
    """The :class:`Workload` of a DLIO workload YAML (the file under DLIO's ``configs/workload/``), unchanged.

    The rule: ckpt-bench reproduces DLIO's checkpoint-only run, so the YAML must say ``workflow.checkpoint: true``
    and ``workflow.train: false`` (DLIO's default for ``train`` is true, which runs a training loop over a data
    set and checkpoints per epoch instead) and ``framework: pytorch``. Given that, every key DLIO reads for data
    loading, training, evaluation, profiling or output (``dataset.*``, ``reader.*``, ``train.*``, ...) is
    accepted and ignored: DLIO does not use them in that run. Every other key must be one DLIO reads for
    checkpointing (``model.*``, ``model.parallelism.*``, ``model.transformer.*``, ``checkpoint.*``); a key DLIO
    does not read at all (``model.model_size``, a typo) raises :class:`WorkloadError` naming it and the keys
    read, and so do the DLIO keys listed in ``_REFUSED``. Keys left out take DLIO's defaults.

    Subset mode (``checkpoint.mode: subset`` with ``model.parallelism.data``) sets ``world_size`` to
    data × tensor × pipeline and ``subset=True``; give the ranks that run to :func:`layout`. ``world_size`` here
    (DLIO: ``mpirun -np``) sets it for the default mode.
    """
    import yaml  # pyyaml; imported here so the module imports with the standard library alone

    where = str(path)
    try:
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle)
    except OSError as exc:
        raise WorkloadError(f"cannot read DLIO workload YAML {where}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise WorkloadError(f"{where} is not valid YAML: {exc}") from exc
    if not isinstance(document, Mapping):
        raise WorkloadError(f"{where}: a DLIO workload YAML is a mapping (model:, checkpoint:, ...), got {document!r}")

    if not set(document) & set(_KNOWN_SECTIONS):
        sections = ", ".join(sorted(set(_KNOWN_SECTIONS)))
        raise WorkloadError(f"{where}: neither a DLIO workload (none of its sections: {sections}) nor a "
                            "Primus/Megatron experiment (modules:, its own or through extends:); its top-level keys: "
                            f"{', '.join(map(str, document))}")
    flat: dict[str, Any] = {}
    _flatten(document, "", flat, where)

    for key, value in flat.items():
        if key in _REFUSED:
            raise WorkloadError(f"{where}: {key} is not supported: {_REFUSED[key]}")
        if key in _READ or key in _CHECKED or key in _IGNORED:
            continue
        section = key.split(".")[0]
        if section in _KNOWN_SECTIONS:
            readable = _readable_keys(section)
            if section == "data_reader":
                readable = _readable_keys("reader")
            raise WorkloadError(
                f"{where}: unknown key {key} (= {value!r}): DLIO does not read it, so it would be silently"
                f" ignored. Keys read under {section}: {', '.join(readable)}"
            )
        raise WorkloadError(
            f"{where}: unknown key {key}: DLIO reads no {section!r} section. Sections read:"
            f" {', '.join(sorted(set(_KNOWN_SECTIONS)))}"
        )

    framework = flat.get("framework", "tensorflow")
    if framework != "pytorch":
        raise WorkloadError(
            f"{where}: framework = {framework!r}{' (DLIO default)' if 'framework' not in flat else ''}; only"
            " framework: pytorch (DLIO's torch.save checkpointing) is reproduced"
        )
    if flat.get("workflow.checkpoint") is not True:
        raise WorkloadError(
            f"{where}: workflow.checkpoint = {flat.get('workflow.checkpoint')!r}; a checkpoint workload needs"
            " workflow.checkpoint: True"
        )
    if flat.get("workflow.train", True) is not False:
        shown = f"= {flat['workflow.train']!r}" if "workflow.train" in flat else "is absent (DLIO's default: True)"
        raise WorkloadError(
            f"{where}: workflow.train {shown}: DLIO would train over a data set and checkpoint per epoch;"
            " ckpt-bench reproduces its checkpoint-only run: set workflow.train: False"
        )
    storage = flat.get("storage.storage_type", "local_fs")
    if storage != "local_fs":
        raise WorkloadError(
            f"{where}: storage.storage_type = {storage!r}; only local_fs (DLIO's torch.save to files) is reproduced"
        )

    values: dict[str, Any] = {field_name: flat[key] for key, field_name in _READ.items() if key in flat}
    if isinstance(values.get("time_between_checkpoints"), Mapping):
        raise WorkloadError(
            f"{where}: checkpoint.time_between_checkpoints = {values['time_between_checkpoints']!r}: only a number"
            " of seconds is supported (DLIO also accepts a random distribution)"
        )
    if isinstance(values.get("checkpoint_folder"), str):
        values["checkpoint_folder"] = values["checkpoint_folder"].rstrip("/")
    if isinstance(values.get("time_between_checkpoints"), int) and not isinstance(
        values.get("time_between_checkpoints"), bool
    ):
        values["time_between_checkpoints"] = float(values["time_between_checkpoints"])

    mode = flat.get("checkpoint.mode", "default")
    data = flat.get("model.parallelism.data")
    if mode not in ("default", "subset"):
        raise WorkloadError(f"{where}: checkpoint.mode = {mode!r}; DLIO knows default and subset")
    if mode == "default" and data is not None:
        raise WorkloadError(
            f"{where}: model.parallelism.data = {data!r} with checkpoint.mode default: DLIO refuses it (it derives"
            " the data-parallel size from the number of ranks); set checkpoint.mode: subset or remove it"
        )
    if mode == "subset":
        if not is_int(data) or data <= 0:
            raise WorkloadError(
                f"{where}: checkpoint.mode subset needs model.parallelism.data, the full job's data-parallel size"
                f" (got {data!r})"
            )
        tp = values.get("tensor_parallelism", 1)
        pp = values.get("pipeline_parallelism", 1)
        if not (is_int(tp) and is_int(pp)):
            raise WorkloadError(f"{where}: model.parallelism.tensor/pipeline must be integers (got {tp!r}, {pp!r})")
        if world_size is not None and world_size != data * tp * pp:
            raise WorkloadError(
                f"{where}: world_size = {world_size} contradicts subset mode's data × tensor × pipeline ="
                f" {data} × {tp} × {pp} = {data * tp * pp}"
            )
        values["world_size"] = data * tp * pp
        values["subset"] = True
    elif world_size is not None:
        values["world_size"] = world_size

    try:
        return Workload(**values)
    except WorkloadError as exc:
        raise WorkloadError(f"{where}: {exc}") from None
