"""The projection of the whole job, as a person reads it: shared by the terminal summary, `--plan` and
report.html. Sizes in GB (10^9 bytes), rates in GB/s, times in seconds, each range as low-high (docs/projection.md).
"""

from __future__ import annotations

from ckpt_bench.present.rows import NONE, duration, gbps_words
from ckpt_bench.projection.model import fit_span, gb, plural
from ckpt_bench.report.schema import ChangeSide, ProjectedTime, Projection, ProjectionFigure, Traffic

__all__ = ["CHANGE_COLUMNS", "PURCHASE_COLUMNS", "SETTING_COLUMNS", "STEP_COLUMNS", "TERM_COLUMNS", "change_rows",
           "hosts_rows", "projection_rows", "projection_title", "purchase_rows", "setting_rows", "step_rows",
           "term_rows", "time_words"]

TERM_COLUMNS = ["term", "seconds", "what"]
SETTING_COLUMNS = ["setting", "value", "from"]
CHANGE_COLUMNS = ["change", "figure", "now", "after the change"]
PURCHASE_COLUMNS = ["storage write / read (GB/s)", "first save", "later saves", "restart"]
STEP_COLUMNS = ["global step", "operation", "CPU here (s)", "busiest host's network", "a rank's buffer", "skipped by"]


def range_words(low: float | None, high: float | None) -> str:
    if low is None:
        return NONE
    if high is None:
        return f"at least {duration(low)}"
    if abs(high - low) <= 1e-3 * max(high, 1e-9):
        return duration(low)
    return f"{duration(low)} to {duration(high)}"


def time_words(time: ProjectedTime | None) -> str:
    """A projected time with its binding limit: '412 s, bound by the client (could also bind: storage)'; where the
    hosts cannot hold it, that, and what it would take if it ran."""
    if time is None:
        return NONE
    if time.feasible is False:
        low, high = ((time.range_if_it_ran_s or []) + [None, None])[:2]
        return f"{time.cannot_run}; if it ran: {range_words(low, high)}, bound by {time.binding}"
    low, high = (time.range_s + [None, None])[:2]
    words = f"{range_words(low, high)}, bound by {time.binding}"
    steps = [term for term in time.terms if term.kind == "step" and term.range_s and term.range_s[0]]
    if time.binding == "rank-count steps" and steps:
        largest = max(steps, key=lambda term: term.range_s[0])
        words += f" (the largest: {largest.name}, {range_words(*(largest.range_s + [None])[:2])})"
    if time.could_also_bind:
        words += f" (could also bind: {', '.join(time.could_also_bind)})"
    return words


def hosts_rows(hosts: dict) -> tuple[str, list[tuple[str, str]]]:
    """--plan's hosts (a workload's preview: what a save and a restart move per host), titled."""
    traffic = Projection.from_json({"save_traffic": hosts["save"], "load_traffic": hosts["load"]})
    title = f"per host ({plural(hosts['nodes'], 'host')} of {hosts['ranks_per_node']} ranks; GB = 10^9 bytes)"
    return title, [("a save writes", _traffic_words(traffic.save_traffic, "write")),
                   ("a restart reads", _traffic_words(traffic.load_traffic, "read"))]


def _traffic_words(traffic: Traffic | None, verb: str) -> str:
    if traffic is None:
        return NONE
    busiest = traffic.busiest_host
    words = (f"{gb(traffic.bytes)} in {plural(traffic.files, 'file')}; {plural(traffic.ranks_moving_bytes, 'rank')} "
             f"on {plural(traffic.hosts_moving_bytes, 'host')} {verb}")
    if busiest is not None:
        words += f"; the busiest, host {busiest.host}, {gb(busiest.bytes)}"
    cached = traffic.page_cached
    if cached is not None:
        words += (f" ({gb(cached.bytes)}, the busiest host {gb(cached.busiest_host_bytes)}, with each host's page "
                  "cache serving its ranks' shared replicas once)")
    return words


def _figure_words(figure: ProjectionFigure | None) -> str:
    if figure is None or figure.value is None:
        return figure.source if figure is not None and figure.source else NONE
    return f"{'at least ' if figure.at_least else ''}{figure.value:,.4g} -- {figure.source}"


def projection_title(projection: Projection) -> str:
    job = projection.job
    if job is None or projection.error:
        return "Projection of the whole job (docs/projection.md)"
    return (f"Projection of the whole job: {job.ranks:,} ranks on {plural(job.nodes, 'host')} of "
            f"{job.ranks_per_node}, {job.engine}, {job.storage} (docs/projection.md; GB = 10^9 bytes)")


def projection_rows(projection: Projection) -> list[tuple[str, str]]:
    """The headline of a projection: what moves, each time with its binding limit, and the inputs."""
    if projection.error:
        return [("projection", projection.error)]
    rows = [("a save writes", _traffic_words(projection.save_traffic, "write")),
            ("a restart reads", _traffic_words(projection.load_traffic, "read")),
            ("save (a process's first)", time_words(projection.save))]
    if projection.second_save is not None and projection.second_save.range_s != (projection.save.range_s if
                                                                                  projection.save else None):
        rows.append(("save (its second)", time_words(projection.second_save)))
    rows += [("save (third and later)", time_words(projection.steady_save)),
             ("restart (load)", time_words(projection.load))]
    steady = projection.steady_save
    if projection.job is not None and projection.job.async_save and steady is not None:
        low, _ = (steady.block_range_s or [None, None])[:2]
        rows.append(("a later save blocks training", f"{range_words(low, None)} -- {steady.block_note}"))
    feasibility = projection.feasibility
    if feasibility is not None:
        rows += [(label, check.what) for label, check in (("host memory, a save", feasibility.save),
                                                          ("host memory, a restart", feasibility.load)) if check]
        if feasibility.files is not None and feasibility.files.what:
            rows.append(("files", feasibility.files.what))
    capacity = projection.capacity
    if capacity is not None:
        rows.append(("storage kept", capacity.what or f"{gb(capacity.checkpoint_bytes)} a checkpoint "
                     f"({capacity.why})"))
        if capacity.retention:
            rows.append(("retention", f"{capacity.retention}; at most {gb(capacity.peak_bytes or 0)} while a save "
                         "writes"))
    inputs = projection.inputs
    if inputs is not None:
        rows += [("client write GB/s a host", _figure_words(inputs.client_write_gbps)),
                 ("client read GB/s a host", _figure_words(inputs.client_read_gbps)),
                 ("storage write GB/s", _figure_words(inputs.storage_write_gbps)),
                 ("storage read GB/s", _figure_words(inputs.storage_read_gbps)),
                 ("network GB/s a host", _figure_words(inputs.network_gbps)),
                 ("requests a second", _figure_words(inputs.write_requests_per_s))]
    costs = projection.rank_costs
    if costs is not None and costs.computed_with:
        versions = ", ".join(f"{name} {version}" for name, version in costs.computed_with.items())
        rows.append(("global steps computed with", f"{versions}, {costs.spent_s or 0:.1f} s of the "
                     f"{costs.budget_s or 0:g} s budget, peak memory {gb(costs.peak_rss_bytes or 0)}"))
    return rows


def term_rows(time: ProjectedTime | None) -> list[list[str]]:
    if time is None:
        return []
    return [[term.name, range_words(*(term.range_s + [None, None])[:2]), term.what or ""] for term in time.terms]


def step_rows(projection: Projection) -> list[list[str]]:
    costs = projection.rank_costs
    if costs is None:
        return []
    rows = []
    for step in costs.steps:
        cpu = NONE if step.cpu_s is None else f"{'at least ' if not step.complete else ''}{step.cpu_s:,.3g}"
        if step.extrapolated is not None and step.cpu_s is not None:
            error = step.extrapolated.error
            cpu += f" (fitted, {fit_span(error)})" if error is not None else " (fitted, error unknown)"
        elif step.rank_sample is not None and step.cpu_s is not None:
            cpu += f" ({step.rank_sample.ranks} of {step.rank_sample.of:,} ranks, +-{step.rank_sample.error:.0%})"
        if step.pairwise is not None and step.pairwise.check_s is not None and step.cpu_s is not None:
            cpu += f" ({step.pairwise.checks:,} overlap checks counted)"
        rows.append([step.name, step.operation, cpu, NONE if step.host_bytes is None else gb(step.host_bytes),
                     NONE if step.rank_memory_bytes is None else gb(step.rank_memory_bytes),
                     "constant structure (later saves)" if step.cached_away else ""])
    return rows


def setting_rows(projection: Projection) -> list[list[str]]:
    """The checkpoint settings the projection follows, each with where it came from."""
    def words(value) -> str:
        return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)

    return [[setting.name, words(setting.value), setting.source] for setting in projection.settings or []]


def _side_words(side: ChangeSide | None) -> str:
    if side is None:
        return NONE
    low, high = (side.range_s + [None, None])[:2]
    words = f"{range_words(low, high)}, bound by {side.binding}"
    return f"cannot run; {words} if it ran" if side.feasible is False else words


def purchase_rows(projection: Projection) -> list[list[str]]:
    """The purchase table: each storage priced, the job's first save, later saves and restart there."""
    return [[f"{gbps_words(row.storage_write_gbps)} / {gbps_words(row.storage_read_gbps)}", time_words(row.save),
             time_words(row.steady_save), time_words(row.load)] for row in projection.purchase or []]


def change_rows(projection: Projection) -> list[list[str]]:
    """What to change: each setting with the figures it moves, now and after."""
    return [[change.change if not number else "", effect.figure, _side_words(effect.before),
             _side_words(effect.after)]
            for change in projection.what_to_change for number, effect in enumerate(change.effects)]
