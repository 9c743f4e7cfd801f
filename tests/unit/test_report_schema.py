"""The report's types and schema: every report we write has the declared shape, and the published schema
is the one the types make."""

from __future__ import annotations

import json

import jsonschema
import pytest
from helpers import LOGS, ROOT, assert_valid_report

from ckpt_bench.report.schema import SCHEMA_VERSION, LogRuns, Report, SaveRecord, SchemaError, json_schema

FIXTURE_REPORTS = sorted((LOGS / "reports").glob("*.json"))


def test_the_published_schema_is_the_one_the_types_make():
    jsonschema.Draft202012Validator.check_schema(json_schema())
    published = json.loads((ROOT / "docs" / "report.schema.json").read_text())
    assert published == json_schema(), "regenerate: python -m ckpt_bench.report.schema > docs/report.schema.json"


@pytest.mark.parametrize("path", FIXTURE_REPORTS, ids=[p.stem for p in FIXTURE_REPORTS])
def test_every_log_report_has_the_declared_shape(path):
    data = json.loads(path.read_text())
    if "error" in data:
        return
    reports = LogRuns.from_json(data).runs if "runs" in data else [Report.from_json(data)]
    for report, typed in zip(data.get("runs", [data]), reports, strict=True):
        assert_valid_report(report)
        assert typed.schema_version == SCHEMA_VERSION and all(isinstance(s, SaveRecord) for s in typed.saves)


def test_a_key_that_is_a_python_keyword_is_a_field_with_an_underscore():
    run = {"status": "interrupted", "interrupted": {"signal": "SIGINT", "exit_code": 130, "pass": "save"}}
    assert Report.from_json({"run": run}).run.interrupted.pass_ == "save"
    assert "pass" in json_schema()["$defs"]["Interrupted"]["properties"]
    assert_valid_report({"run": run})


def test_an_undeclared_key_or_a_wrong_type_is_named():
    with pytest.raises(SchemaError, match=r"report.saves\[0\]: keys not in the report's types: speed"):
        Report.from_json({"saves": [{"iteration": 2, "speed": 3}]})
    with pytest.raises(SchemaError, match=r"report.num_saved: 'three'"):
        Report.from_json({"num_saved": "three"})
    with pytest.raises(jsonschema.ValidationError):
        assert_valid_report({"saves": [{"iteration": 2, "speed": 3}]})
