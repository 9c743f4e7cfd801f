"""`--format table`: the report for a terminal. Only presents the JSON report's values."""

from __future__ import annotations

COLUMNS = ("op", "iteration", "block s", "total s", "bytes", "MiB/s", "complete", "time source")


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def format_table(report: dict) -> str:
    rows = [
        ("save", s["iteration"], s["block_time"], s["total_time"], s["bytes"], s["bandwidth"],
         s["complete"], s.get("time_source"))
        for s in report.get("saves") or []
    ]
    for load in report.get("loads") or ([report["load"]] if report.get("load") else []):
        rows.append(("load", load["iteration"], None, load["time"], load["bytes"], load["bandwidth"],
                     load["complete"], load.get("time_source")))
    cells = [COLUMNS, *([_cell(v) for v in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    summary = {
        "saves complete": report.get("num_saved"),
        "accurate (no overlapping saves)": report.get("accurate"),
        "last save block / total s": f"{_cell(report.get('save_block_time'))} / "
                                     f"{_cell(report.get('save_total_time'))}",
        "last save MiB/s": report.get("save_bandwidth_in_mbps"),
        "load s": report.get("load_time"),
        "time source": f"{_cell(report.get('time_source'))} "
                       f"(resolution {_cell(report.get('time_resolution_s'))} s)",
    }
    lines += ["", *(f"{k}: {_cell(v)}" for k, v in summary.items())]
    if report.get("notes"):
        lines += ["", "notes:", *(f"  - {note}" for note in report["notes"])]
    return "\n".join(lines)
