"""The report's types: what report.json holds, as dataclasses, and the JSON Schema made from them.

The report engine and assembly write report.json; these types say what it may hold, field by field, so a
reader gets it typed (`Report.from_json`) and a key nobody declared is an error, not a silent extra. The
published schema (`docs/report.schema.json`, `python -m ckpt_bench.report.schema`) is generated from the
same types, and the tests check that every report we write validates against it.

Sections that belong to one backend or feature (`config`, `environment`, `advice`, `training`,
`storage_baseline`, `mlperf`, `preflight`, `comms`, `measurement`) are objects whose keys their own module
defines; the checkpoint figures every report shares are typed here to the last field.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Union

SCHEMA_VERSION = 1
Section = dict[str, Any]


class SchemaError(ValueError):
    """A report that does not have the declared shape."""


@dataclass
class Spread:
    """The slowest and fastest rank of one figure."""

    max: float | None = None
    max_rank: int | None = None
    min: float | None = None
    min_rank: int | None = None


@dataclass
class Stat:
    """Statistics of one figure over saves."""

    n: int = 0
    min: float | None = None
    median: float | None = None
    mean: float | None = None
    max: float | None = None
    stdev: float | None = None


@dataclass
class FirstSave:
    """The first save of a process, shown apart (a writer's start-up)."""

    iteration: int | None = None
    block_time: float | None = None
    total_time: float | None = None
    bandwidth: float | None = None


@dataclass
class StatsBlock:
    block_time: Stat | None = None
    total_time: Stat | None = None
    bandwidth: Stat | None = None


@dataclass
class SaveStats(StatsBlock):
    """Over the complete saves; `excluding_first` is the steady state."""

    first_save: FirstSave | None = None
    excluding_first: StatsBlock | None = None
    steady: Section | None = None


@dataclass
class Operation:
    """What a save and a load record share."""

    iteration: int | None = None
    complete: bool = False
    ranks: int = 0
    bytes: int | None = None
    bytes_source: str | None = None
    peak_rss_bytes: int | None = None
    peak_rss_bytes_per_rank: Spread | None = None
    peak_device_bytes: int | None = None
    peak_device_bytes_per_rank: Spread | None = None
    time_source: str | None = None
    time_resolution_s: float | None = None
    bandwidth: float | None = None
    error: str | None = None
    repetition: int | None = None


@dataclass
class SaveRecord(Operation):
    """One save across ranks: the slowest rank's times."""

    block_time: float | None = None
    total_time: float | None = None
    block_time_per_rank: Spread | None = None
    total_time_per_rank: Spread | None = None
    overlapped: bool = False
    wait_for_previous: float | None = None
    source_semantics: dict[str, str] | None = None
    unusual: list[str] | None = None


@dataclass
class LoadRecord(Operation):
    """One load across ranks."""

    time: float | None = None
    time_per_rank: Spread | None = None
    cache: str | None = None


@dataclass
class Verification:
    """Every tensor loaded compared with what was saved."""

    verified: bool | None = None
    ranks_checked: int = 0
    tensors_checked: int = 0
    mismatched: int = 0
    first_mismatch: Section | None = None
    calls_checked: int | None = None


@dataclass
class RunSection:
    """The run behind the report (our runs only)."""

    dir: str | None = None
    backend: str | None = None
    status: str | None = None
    passes: list[Section] = field(default_factory=list)
    interrupted: Section | None = None
    launcher: Section | None = None
    repetitions: list[str] | None = None
    node_rank: int | None = None


@dataclass
class Report:
    """report.json: the Primus checkpoint tool's keys first, then ours."""

    world_size: int | None = None
    data_parallel_size: int | None = None
    ckpt_format: str | None = None
    ckpt_fully_parallel_save: bool | None = None
    ckpt_fully_parallel_load: bool | None = None
    async_save: bool | None = None
    save: str | None = None
    save_interval: int | None = None
    optimizer: str | None = None
    use_distributed_optimizer: bool | None = None
    params_dtype: str | None = None
    main_params_dtype: str | None = None
    exp_avg_dtype: str | None = None
    exp_avg_sq_dtype: str | None = None
    save_block_time: float | None = None
    save_total_time: float | None = None
    accurate: bool | None = None
    num_saved: int | None = None
    load_time: float | None = None
    iter_folder_size: int | None = None
    save_bandwidth_in_mbps: float | None = None
    load_bandwidth_in_mbps: float | None = None
    saves: list[SaveRecord] = field(default_factory=list)
    stats: SaveStats | None = None
    load: LoadRecord | None = None
    loads: list[LoadRecord] | None = None
    verified: bool | None = None
    verification: Verification | None = None
    units: dict[str, str] | None = None
    time_source: str | None = None
    time_resolution_s: float | None = None
    environment: Section | None = None
    notes: list[str] = field(default_factory=list)
    config: Section | None = None
    unmatched_ends: list[Section] | None = None
    mlperf: Section | None = None
    preflight: Section | None = None
    comms: Section | None = None
    training: Section | None = None
    storage_baseline: Section | None = None
    save_fraction_of_peak: float | None = None
    load_fraction_of_peak: float | None = None
    not_cleaned_up: list[str] | None = None
    measurement: Section | None = None
    advice: Section | None = None
    repeat_stats: Section | None = None
    repeats: int | None = None
    run: RunSection | None = None
    schema_version: int | None = None

    @classmethod
    def from_json(cls, data: dict) -> Report:
        """A report.json, typed; raises SchemaError for a key that is not declared or a wrong type."""
        return _build(cls, data, "report")


def _unwrap(annotation) -> tuple[list, bool]:
    """The alternatives of a type and whether None is one of them."""
    if typing.get_origin(annotation) in (Union, types.UnionType):
        options = list(typing.get_args(annotation))
        return [o for o in options if o is not type(None)], type(None) in options
    return [annotation], False


def _hints(cls) -> dict:
    return typing.get_type_hints(cls, vars(sys.modules[__name__]))


def _build(annotation, value, where: str):
    options, nullable = _unwrap(annotation)
    if value is None:
        if nullable:
            return None
        raise SchemaError(f"{where}: null where {annotation} is expected")
    for option in options:
        if dataclasses.is_dataclass(option):
            if not isinstance(value, dict):
                raise SchemaError(f"{where}: expected an object, got {type(value).__name__}")
            hints = _hints(option)
            unknown = sorted(set(value) - set(hints))
            if unknown:
                raise SchemaError(f"{where}: keys not in the report's types: {', '.join(unknown)}")
            return option(**{key: _build(hints[key], item, f"{where}.{key}") for key, item in value.items()})
        origin = typing.get_origin(option)
        if origin is list:
            (item_type,) = typing.get_args(option)
            if not isinstance(value, list):
                raise SchemaError(f"{where}: expected a list, got {type(value).__name__}")
            return [_build(item_type, item, f"{where}[{index}]") for index, item in enumerate(value)]
        if origin is dict or option is Any:
            return value
        if option is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
        if isinstance(value, option) and not (option is int and isinstance(value, bool)):
            return value
    raise SchemaError(f"{where}: {value!r} is not {annotation}")


def _schema(annotation, definitions: dict) -> dict:
    options, nullable = _unwrap(annotation)
    alternatives = []
    for option in options:
        if dataclasses.is_dataclass(option):
            name = option.__name__
            if name not in definitions:
                definitions[name] = {}  # a placeholder while its fields are made (recursion)
                hints = _hints(option)
                definitions[name] = {
                    "type": "object", "description": (option.__doc__ or "").strip(),
                    "properties": {key: _schema(hint, definitions) for key, hint in hints.items()},
                    "additionalProperties": False}
            alternatives.append({"$ref": f"#/$defs/{name}"})
        elif typing.get_origin(option) is list:
            alternatives.append({"type": "array", "items": _schema(typing.get_args(option)[0], definitions)})
        elif typing.get_origin(option) is dict or option is Any:
            alternatives.append({"type": "object"} if option is not Any else {})
        else:
            alternatives.append({"type": {int: "integer", float: "number", str: "string", bool: "boolean"}[option]})
    if nullable:
        alternatives.append({"type": "null"})
    return alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}


def json_schema() -> dict:
    """The JSON Schema (draft 2020-12) of report.json, made from `Report`."""
    definitions: dict = {}
    root = _schema(Report, definitions)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "ckpt-bench/report.schema.json",
            "title": "ckpt-bench report", "description": f"schema_version {SCHEMA_VERSION}", **root,
            "$defs": definitions}


if __name__ == "__main__":
    print(json.dumps(json_schema(), indent=2))
