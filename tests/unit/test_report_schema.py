"""The report's types and schema: every report we write has the declared shape, and the published schema
is the one the types make."""

from __future__ import annotations

import json

import jsonschema
import pytest
from helpers import LOGS, ROOT, assert_valid_report

from ckpt_bench.report.schema import SCHEMA_VERSION, Report, SaveRecord, SchemaError, json_schema

FIXTURE_REPORTS = sorted((LOGS / "reports").glob("*.json"))


def test_the_published_schema_is_the_one_the_types_make():
    jsonschema.Draft202012Validator.check_schema(json_schema())
    published = json.loads((ROOT / "docs" / "report.schema.json").read_text())
    assert published == json_schema(), "regenerate: python -m ckpt_bench.report.schema > docs/report.schema.json"


@pytest.mark.parametrize("path", FIXTURE_REPORTS, ids=[p.stem for p in FIXTURE_REPORTS])
def test_every_log_report_has_the_declared_shape(path):
    data = json.loads(path.read_text())
    for report in data.get("runs", [data]) if "error" not in data else []:
        report = {key: value for key, value in report.items() if key != "sources"}
        assert_valid_report(report)
        typed = Report.from_json(report)
        assert typed.schema_version == SCHEMA_VERSION and all(isinstance(s, SaveRecord) for s in typed.saves)


def test_an_undeclared_key_or_a_wrong_type_is_named():
    with pytest.raises(SchemaError, match=r"report.saves\[0\]: keys not in the report's types: speed"):
        Report.from_json({"saves": [{"iteration": 2, "speed": 3}]})
    with pytest.raises(SchemaError, match=r"report.num_saved: 'three'"):
        Report.from_json({"num_saved": "three"})
    with pytest.raises(jsonschema.ValidationError):
        assert_valid_report({"saves": [{"iteration": 2, "speed": 3}]})
