"""The run's output: results.json (every figure), summary.md (tables), and PNG plots.

`python -m benchmarks.report results/results.json` re-renders the summary and the plots from
a results file, so a report can be reworked without measuring again.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
JSON_NAME = "results.json"
SUMMARY_NAME = "summary.md"
LATENCY_PLOT = "latency_cdf.png"
THROUGHPUT_PLOT = "throughput.png"
COST_PLOT = "cost.png"
BACKLOG_PLOT = "sustained_backlog.png"
# Peers measured on this machine with no-op handlers and library defaults (the issue's
# figures): commit -> handler start, p50 / p99 in ms; drain of 20,000 jobs, jobs/s.
PEERS_LATENCY_MS = {
    "PgQueuer 1.6": (2.39, 3.54),
    "Procrastinate 3.10": (2.30, 4.05),
    "Graphile Worker (Node)": (1.22, 4.43),
}
PEERS_DRAIN_PER_S = {
    "PgQueuer (batch 10)": 3900,
    "PgQueuer (batch 100)": 10500,
    "Procrastinate": 400,
    "Graphile Worker (tuned)": 18900,
}
# A "small fraction": notify's statements under load, over poll-at-10ms's.
SMALL_FRACTION = 0.25


# -- targets ---------------------------------------------------------------------------------


def _mode(results: dict[str, Any], name: str) -> dict[str, Any] | None:
    for mode in results.get("latency", {}).get("modes", []):
        if mode["mode"] == name:
            return mode  # type: ignore[no-any-return]
    return None


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict) or data.get(key) is None:
            return None
        data = data[key]
    return data


def _target(
    name: str, goal: str, value: float | None, ok: Callable[[float], bool], shown: str
) -> dict[str, Any]:
    return {
        "target": name,
        "goal": goal,
        "value": value,
        "measured": shown if value is not None else "not measured",
        "met": None if value is None else bool(ok(value)),
    }


def _at_least(goal: float) -> Callable[[float], bool]:
    return lambda v: v >= goal


def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target of the issue, its measured value, and whether it is met."""
    targets: list[dict[str, Any]] = []
    notify = _mode(results, "notify")
    poll_1s = _mode(results, "poll 1s")
    poll_10ms = _mode(results, "poll 10ms")
    floor_p50 = _get(results, "latency", "floor", "commit_to_notification_ms", "p50")
    claim_p50 = _get(notify, "commit_to_claim_ms", "p50")
    claim_p99 = _get(notify, "commit_to_claim_ms", "p99")
    smtp_p50 = _get(notify, "commit_to_smtp_ms", "p50")
    targets.append(
        _target(
            "notify commit->claim p50",
            "<= 1.0 ms",
            claim_p50,
            lambda v: v <= 1.0,
            f"{claim_p50} ms",
        )
    )
    targets.append(
        _target(
            "notify commit->claim p99",
            "<= 3.0 ms",
            claim_p99,
            lambda v: v <= 3.0,
            f"{claim_p99} ms",
        )
    )
    ratio = None if not claim_p50 or not floor_p50 else claim_p50 / floor_p50
    targets.append(
        _target(
            "notify commit->claim p50 / LISTEN floor p50",
            "<= 10x",
            ratio,
            lambda v: v <= 10,
            f"{ratio:.1f}x" if ratio else "",
        )
    )
    targets.append(
        _target(
            "notify commit->SMTP-accepted p50",
            "<= 3 ms",
            smtp_p50,
            lambda v: v <= 3.0,
            f"{smtp_p50} ms",
        )
    )
    poll_p50 = _get(poll_1s, "commit_to_smtp_ms", "p50")
    speedup = None if not poll_p50 or not smtp_p50 else poll_p50 / smtp_p50
    targets.append(
        _target(
            "poll 1s p50 / notify p50 (commit->SMTP)",
            ">= 100x",
            speedup,
            lambda v: v >= 100,
            f"{speedup:.0f}x" if speedup else "",
        )
    )
    targets.append(_statement_share(notify, poll_10ms))
    idle = _get(notify, "idle", "statements_per_s_per_worker")
    if idle is None:
        idle = _get(notify, "idle", "round_trips_per_s_per_worker")
    targets.append(
        _target("notify idle statements/s per worker", "< 1", idle, lambda v: v < 1, f"{idle}/s")
    )
    drains = results.get("throughput", {}).get("drains", [])
    # The drain targets are at library defaults; tuned profiles are shown beside them.
    for processes, goal in ((1, 10_000), (2, 10_000)):
        null_drains = [
            d
            for d in drains
            if d["transport"] == "null"
            and d["processes"] == processes
            and d["profile"] == "defaults"
        ]
        best_null = max((d["deliveries_per_s"] or 0 for d in null_drains), default=None)
        targets.append(
            _target(
                f"null transport, {processes} process(es), defaults",
                f">= {goal:,} deliveries/s",
                best_null,
                _at_least(goal),
                f"{best_null:,.0f}/s" if best_null else "",
            )
        )
    worst_rt = max((d["round_trips_per_delivery"] for d in drains), default=None)
    targets.append(
        _target(
            "round trips per delivery under load (worst drain)",
            "<= 2",
            worst_rt,
            lambda v: v <= 2,
            f"{worst_rt}" if worst_rt is not None else "",
        )
    )
    baseline = {
        b["processes"]: b["messages_per_s"]
        for b in _get(results, "throughput", "smtp_baseline") or []
    }
    for d in drains:
        if d["transport"] != "smtp" or not baseline.get(d["processes"]):
            continue
        share = (d["deliveries_per_s"] or 0) / baseline[d["processes"]]
        targets.append(
            _target(
                f"SMTP drain / bare aiosmtplib, {d['processes']} process(es) ({d['profile']})",
                ">= 60%",
                share,
                lambda v: v >= 0.6,
                f"{share:.0%}",
            )
        )
    targets += _cpu_per_delivery_targets(drains)
    runs = _get(results, "trigger", "runs") or []
    most = max((r["producers"] for r in runs), default=None)
    what = {"request": "request_verification", "insert": "worst case: 1-statement"}
    for run in runs:
        if run["producers"] != most:
            continue
        overhead = run["overhead_pct"]
        targets.append(
            _target(
                f"trigger cost, {most} producers ({what.get(run.get('workload', ''), '')})",
                "< 10% of commit rate",
                overhead,
                lambda v: v < 10,
                f"{overhead:.1f}%",
            )
        )
    targets += _sustained_targets(results.get("sustained"))
    paths = _get(results, "events", "delivery_path") or []
    ratio = max((p["ratio"] for p in paths), default=None)
    targets.append(
        _target(
            "events: claim-to-completion CPU per delivery, on / off (the worse profile)",
            "<= 1.10x",
            ratio,
            lambda v: v <= 1.10,
            f"{ratio:.3f}x" if ratio is not None else "",
        )
    )
    return targets


# CPU per delivery, microseconds: the worker process's own, and the whole PostgreSQL cluster's.
CPU_PER_DELIVERY_GOAL_US = 200


def _cpu_per_delivery_targets(drains: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Worker and PostgreSQL CPU per delivery in the one-process SMTP drain at defaults."""
    drain = next(
        (
            d
            for d in drains
            if d["transport"] == "smtp" and d["processes"] == 1 and d["profile"] == "defaults"
        ),
        None,
    )
    targets = []
    for label, key in (("worker", "worker_cpu_s"), ("PostgreSQL", "pg_cpu_s")):
        used = _get(drain, "usage", key)
        per = None if used is None or not drain or not drain["sent"] else used / drain["sent"] * 1e6
        targets.append(
            _target(
                f"{label} CPU per SMTP delivery (1 process, defaults)",
                f"<= {CPU_PER_DELIVERY_GOAL_US} µs",
                per,
                lambda v: v <= CPU_PER_DELIVERY_GOAL_US,
                f"{per:.0f} µs" if per is not None else "",
            )
        )
    return targets


def _sustained_run(
    sustained: dict[str, Any] | None, producer: str, rate: float | None, **fields: int
) -> dict[str, Any] | None:
    """The sustained run of this producer at this offered rate (and processes), if measured."""
    for run in (sustained or {}).get("runs", []):
        if run["producer"] != producer or run["offered_per_s"] != rate:
            continue
        if all(run.get(k) == v for k, v in fields.items()):
            return run  # type: ignore[no-any-return]
    return None


def _offered_note(run: dict[str, Any] | None) -> str:
    """What a target's figure must be read with when its run did not keep its offered rate."""
    if run is None or run.get("producers_kept_rate", True):
        return ""
    return f" (offered rate not reached: {run['achieved_per_s']:,.0f}/s)"


def _ms_target(
    name: str, run: dict[str, Any] | None, key: str, percentile: str, goal: float
) -> dict[str, Any]:
    value = _get(run, key, percentile)
    return _target(
        name,
        f"<= {goal:g} ms",
        value,
        lambda v: v <= goal,
        f"{value} ms{_offered_note(run)}",
    )


def _sustained_targets(sustained: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not sustained:
        return []
    targets: list[dict[str, Any]] = []
    for probe in sustained.get("probes", []):
        p10 = probe.get("p10_ms")
        p50 = _get(probe, "request_ms", "p50")
        targets.append(
            _target(
                f"no delayed-ACK stall, {probe['server']} (one kept-alive connection)",
                "fastest 10% < 30 ms (a stall delays each request about 40 ms)",
                p10,
                lambda v: v < 30,
                f"p10 {p10:.2f} ms, p50 {p50} ms" if p10 is not None else "",
            )
        )
    library_max = _sustained_run(sustained, "library", None, workers=1)
    calls = _get(library_max, "achieved_per_s")
    targets.append(
        _target(
            "request_verification, 4 connections, as fast as they go (1 worker running)",
            ">= 2,000 calls/s",
            calls,
            lambda v: v >= 2000,
            f"{calls:,.0f}/s" if calls is not None else "",
        )
    )
    library = [r for r in sustained.get("runs", []) if r["producer"] == "library"]
    trips = max((r["round_trips_per_call"] or 0 for r in library), default=None) or None
    targets.append(
        _target(
            "request_verification round trips per call, COMMIT included",
            "<= 2",
            trips,
            lambda v: v <= 2,
            f"{trips}",
        )
    )
    api_200 = _sustained_run(sustained, "http", 200.0, api_processes=1)
    targets.append(
        _ms_target("API POST request->202 p50 at 200/s", api_200, "request_to_202_ms", "p50", 3.0)
    )
    api_max = _sustained_run(sustained, "http", None, api_processes=1)
    requests = _get(api_max, "achieved_per_s")
    targets.append(
        _target(
            f"one API process, as fast as {sustained.get('http_connections', 4)} kept-alive "
            "connections go",
            ">= 1,200 requests/s",
            requests,
            lambda v: v >= 1200,
            f"{requests:,.0f}/s" if requests is not None else "",
        )
    )
    at_1000 = _sustained_run(sustained, "library", 1000.0, workers=1)
    seconds = _get(at_1000, "seconds")
    where = f"1,000/s for {seconds:.0f} s, 1 worker" if seconds else "1,000/s, 1 worker"
    targets.append(
        _ms_target(f"{where}: commit->SMTP-accepted p50", at_1000, "commit_to_smtp_ms", "p50", 5)
    )
    targets.append(
        _ms_target(f"{where}: commit->SMTP-accepted p99", at_1000, "commit_to_smtp_ms", "p99", 25)
    )
    slope = _get(at_1000, "backlog", "slope_per_s")
    flat = bool(at_1000 and at_1000.get("backlog_flat") and not at_1000.get("undelivered"))
    shown = ""
    if slope is not None:
        shown = (
            f"{slope:+.1f} rows/s, max {_get(at_1000, 'backlog', 'max')}, drained "
            f"{_get(at_1000, 'backlog', 'drained_s')} s after the window{_offered_note(at_1000)}"
        )
    targets.append(
        _target(
            f"{where}: backlog flat",
            "trend <= 1% of the rate, or drained within 0.5 s",
            slope,
            lambda v: flat,
            shown,
        )
    )
    at_max = _sustained_run(sustained, "library", None, workers=1)
    for stat, goal in (("p50", 3.0), ("p99", 15.0)):
        targets.append(
            _ms_target(
                f"4 producers as fast as they go, 1 worker: commit->SMTP-accepted {stat}",
                at_max,
                "commit_to_smtp_ms",
                stat,
                goal,
            )
        )
    at_50 = _sustained_run(sustained, "library", 50.0, workers=1)
    for key, label, p50, p99 in (
        ("commit_to_smtp_ms", "commit->SMTP-accepted", 1.0, 2.0),
        ("commit_to_claim_committed_ms", "commit->claim committed", 1.0, 3.0),
    ):
        targets.append(_ms_target(f"50/s, 1 worker: {label} p50", at_50, key, "p50", p50))
        targets.append(_ms_target(f"50/s, 1 worker: {label} p99", at_50, key, "p99", p99))
    return targets


def _statements(mode: dict[str, Any] | None, window: str) -> float | None:
    """Statements (or, without pg_stat_statements, round trips) in a mode's window."""
    usage = _get(mode, window)
    if usage is None:
        return None
    count = usage.get("statements")
    return float(count if count is not None else usage["round_trips"])


def _statement_share(notify: dict[str, Any] | None, poll: dict[str, Any] | None) -> dict[str, Any]:
    """notify's statements over poll-at-10ms's across an idle window and a loaded one of
    equal length (at 100/s both modes spend about the same per delivery; the difference is
    what polling costs while there is nothing to find)."""
    name = "notify statements / poll 10ms's (idle + load windows)"
    goal = f"<= {SMALL_FRACTION:.0%}"
    parts = [_statements(m, w) for m in (notify, poll) for w in ("idle", "load")]
    if any(p is None for p in parts):
        return _target(name, goal, None, lambda v: True, "")
    n_idle, n_load, p_idle, p_load = (p or 0.0 for p in parts)
    if not p_idle + p_load:
        return _target(name, goal, None, lambda v: True, "")
    share = (n_idle + n_load) / (p_idle + p_load)
    shown = f"{share:.1%}"
    if p_idle and p_load:
        shown += f" (idle {n_idle / p_idle:.1%}, loaded {n_load / p_load:.0%})"
    return _target(name, goal, share, lambda v: v <= SMALL_FRACTION, shown)


# -- markdown --------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}" if value >= 1 else f"{value:.3f}"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]


def _percentiles(dist: dict[str, Any] | None) -> list[str]:
    if dist is None:
        return ["-"] * 4
    return [_ms(dist["p50"]), _ms(dist["p90"]), _ms(dist["p99"]), _ms(dist["max"])]


def markdown(results: dict[str, Any]) -> str:
    out: list[str] = [f"# notifier benchmarks{' (quick run)' if results.get('quick') else ''}", ""]
    m = results["machine"]
    out += [
        f"Run {m['date']} on {m['cpu_model']}, {m['cores']} cores, {m['memory_gib']} GiB, "
        f"{m['os']} (kernel {m['kernel']}); "
        f"PostgreSQL {m['postgresql']} ({m['postgresql_server']}, "
        f"{m['postgresql_connection']}, fsync={m['postgresql_settings'].get('fsync')}, "
        f"synchronous_commit={m['postgresql_settings'].get('synchronous_commit')}); "
        f"Python {m['python']}; notifier at {m['git_commit']}"
        f"{' with uncommitted changes' if m['git_dirty'] else ''}. "
        f"The whole run took {results['duration_s']:.0f} s.",
        "",
    ]
    out += _latency_md(results.get("latency"))
    out += _cost_md(results.get("latency"))
    out += _throughput_md(results.get("throughput"))
    out += _trigger_md(results.get("trigger"))
    out += _sustained_md(results.get("sustained"))
    out += _drivers_md(results.get("drivers"))
    out += _events_md(results.get("events"))
    targets = results.get("targets", [])
    if targets:
        out += ["## Targets", ""]
        rows = [
            [
                t["target"],
                t["goal"],
                t["measured"],
                {True: "met", False: "**missed**", None: "-"}[t["met"]],
            ]
            for t in targets
        ]
        out += _table(["target", "goal", "measured", ""], rows)
    return "\n".join(out)


def _latency_md(latency: dict[str, Any] | None) -> list[str]:
    if not latency:
        return []
    out = [
        "## Latency",
        "",
        f"{latency['rate_per_s']:.0f} verifications/s for {latency['load_seconds']:.0f} s "
        f"per mode (in {latency.get('rounds', 1)} rounds, the modes taking turns), "
        f"{latency['workers']} worker process(es) at library defaults, SMTP into the recording "
        "sink. From the producer's clock after COMMIT returned to the claim statement's "
        "database clock (claimed_at) and to the sink's clock at the end of DATA; ms.",
        "",
    ]
    floor = latency["floor"]["commit_to_notification_ms"]
    floor_p50 = floor["p50"] if floor else None
    rows = [
        ["LISTEN floor (bare asyncpg connection)", *_percentiles(floor), "", "", "", "", "1x", "-"]
    ]
    for mode in latency["modes"]:
        claim, smtp = mode["commit_to_claim_ms"], mode["commit_to_smtp_ms"]
        ratio = f"{claim['p50'] / floor_p50:.1f}x" if claim and floor_p50 else "-"
        rows.append(
            [
                mode["mode"],
                *_percentiles(claim),
                *_percentiles(smtp),
                ratio,
                f"{mode['delivered']}/{mode['produced']}",
            ]
        )
    out += _table(
        [
            "mode",
            "claim p50",
            "p90",
            "p99",
            "max",
            "SMTP p50",
            "p90",
            "p99",
            "max",
            "claim p50 / floor",
            "delivered",
        ],
        rows,
    )
    peers = ", ".join(f"{k} {p50} / {p99}" for k, (p50, p99) in PEERS_LATENCY_MS.items())
    out += [f"Peers (commit -> handler start, p50 / p99 ms, same machine): {peers}.", ""]
    commit = latency.get("claim_commit") or {}
    if commit:
        out += ["One-row claims timed from the client (ms):", ""]
        rows = [[name, *_percentiles(dist)] for name, dist in commit.items()]
        out += _table(["claim", "p50", "p90", "p99", "max"], rows)
    return out


def _cost_md(latency: dict[str, Any] | None) -> list[str]:
    if not latency:
        return []
    out = [
        "## Cost per mode",
        "",
        "Statements the workers sent (pg_stat_statements, their own role) and CPU seconds of "
        "the worker processes and of the whole PostgreSQL cluster, idle (no traffic) and under "
        "the load above. A round trip is one message to the server: asyncpg's pool reset sends "
        "four statements in one.",
        "",
    ]
    rows = []
    for mode in latency["modes"]:
        idle, load = mode["idle"], mode["load"]
        rows.append(
            [
                mode["mode"],
                _num(idle["statements_per_s_per_worker"], 2),
                _num(idle["worker_cpu_s"], 2),
                _num(idle["pg_cpu_s"], 2),
                _num(load["statements_per_s"], 1),
                _num(load["round_trips_per_s"], 1),
                _num(load.get("round_trips_per_delivery"), 2),
                _num(load["worker_cpu_s"], 2),
                _num(load["pg_cpu_s"], 2),
                _num(load.get("other_cpu_s"), 2),
            ]
        )
    out += _table(
        [
            "mode",
            "idle stmts/s/worker",
            "idle worker CPU s",
            "idle PG CPU s",
            "load stmts/s",
            "load round trips/s",
            "round trips/delivery",
            "load worker CPU s",
            "load PG CPU s",
            "load other CPU s",
        ],
        rows,
    )
    idle_s, load_s = latency["idle_seconds"], latency["load_seconds"]
    out += [
        f"Idle window {idle_s:.0f} s, load window {load_s:.0f} s (CPU seconds are per window).",
        "",
    ]
    return out


def _throughput_md(throughput: dict[str, Any] | None) -> list[str]:
    if not throughput:
        return []
    out = [
        "## Throughput",
        "",
        f"Draining {throughput['rows']:,} rows committed in one statement while the workers "
        "idled (notify mode): rows over COMMIT-returned to the last completion.",
        "",
    ]
    rows = []
    for d in throughput["drains"]:
        usage = d["usage"]
        rows.append(
            [
                d["transport"],
                str(d["processes"]),
                d["profile"],
                d["sink"] or "-",
                _num(d["deliveries_per_s"], 0),
                _num(d.get("seconds_to_99pct"), 2) + " / " + _num(d["seconds"], 2),
                _num(d["round_trips_per_delivery"], 3),
                _num(d["statements_per_delivery"], 3),
                _num(usage["worker_cpu_s"], 2),
                _num(usage["pg_cpu_s"], 2),
                _num(usage.get("other_cpu_s"), 2),
                f"{d['sent']}/{d['rows']}",
            ]
        )
    out += _table(
        [
            "transport",
            "processes",
            "settings",
            "sink",
            "deliveries/s",
            "99% / all done (s)",
            "round trips/delivery",
            "statements/delivery",
            "worker CPU s",
            "PG CPU s",
            "other CPU s",
            "sent",
        ],
        rows,
    )
    base = throughput.get("smtp_baseline") or []
    if base:
        out += [
            "Bare aiosmtplib loop (one ready-made message, same sink; measured before the "
            "drains and after each profile's, the median round is the ceiling):",
            "",
        ]
        out += _table(
            ["processes", "connections each", "sink", "messages/s (median)", "rounds"],
            [
                [
                    str(b["processes"]),
                    str(b["connections_per_process"]),
                    b["sink"],
                    _num(b["messages_per_s"], 0),
                    ", ".join(_num(r, 0) for r in b.get("rounds_per_s", [b["messages_per_s"]])),
                ]
                for b in base
            ],
        )
    peers = ", ".join(f"{k} {v:,}/s" for k, v in PEERS_DRAIN_PER_S.items())
    out += [f"Peers (20,000 queued jobs, one worker process, same machine): {peers}.", ""]
    return out


def _trigger_md(trigger: dict[str, Any] | None) -> list[str]:
    if not trigger:
        return []
    out = [
        "## The NOTIFY trigger's insert cost",
        "",
        f"Commits per second ({trigger['client']} clients, {trigger['seconds_per_run']:.0f} s "
        f"runs, median of {trigger['rounds']} alternating rounds), a LISTEN connection "
        "consuming the notifications. `request`: each transaction is what "
        "request_verification sends; `insert`: one statement writing a verification and its "
        "outbox row (the worst case).",
        "",
    ]
    rows = [
        [
            r.get("workload", "insert"),
            str(r["producers"]),
            _num(r["commits_per_s_without_trigger"], 0),
            _num(r["commits_per_s_with_trigger"], 0),
            f"{r['overhead_pct']:.1f}%",
        ]
        for r in trigger["runs"]
    ]
    out += _table(["workload", "producers", "without trigger /s", "with trigger /s", "cost"], rows)
    return out


def _drivers_md(drivers: dict[str, Any] | None) -> list[str]:
    if not drivers:
        return []
    out = [
        "## The library call on each driver",
        "",
        f"Calls per second over {drivers['connections']} connections, each call its own "
        f"signup transaction (BEGIN, the request, COMMIT), {drivers['seconds_per_run']:.0f} s "
        f"runs, median of {drivers['rounds']} alternating rounds. *Adapter* and *driver "
        "alone*: the same transaction on arguments made beforehand, through the runner "
        "notifier picks for the connection and with the driver's own call of the same "
        "statement. *Added*: what one call costs beyond the driver alone, in µs of a "
        "connection's time (the adapter's, and the library call's: validation, keyed digests "
        "and the adapter).",
        "",
    ]
    rows = [
        [
            r["driver"],
            _num(r["calls_per_s"], 0),
            _num(r["adapter_per_s"], 0),
            _num(r["driver_alone_per_s"], 0),
            f"{r['adapter_vs_driver_alone']:.2f}",
            f"{r['call_vs_driver_alone']:.2f}",
            f"{r['call_vs_asyncpg_call']:.2f}",
            f"{r['adapter_added_us_per_call']:.0f} / {r['added_us_per_call']:.0f} µs",
        ]
        for r in drivers["runs"]
    ]
    header = ["driver", "library call /s", "adapter /s", "driver alone /s", "adapter / alone"]
    header += ["call / alone", "call vs asyncpg", "added: adapter / call"]
    out += _table(header, rows)
    return out


def _events_md(events: dict[str, Any] | None) -> list[str]:
    if not events:
        return []
    request, delivery = events["request_path"], events["delivery_path"]
    out = [
        "## What events cost, and webhooks' pace",
        "",
        f"The request path: the library call on asyncpg over {request['connections']} "
        f"connections, {request['seconds_per_run']:.0f} s runs, median of {request['rounds']} "
        "alternating rounds, with the triggers that write a verification's events on and off "
        "(the request is one statement either way). The delivery path: "
        f"{delivery[0]['rows']:,} rows drained by one worker to the null transport, with "
        "the trigger that writes verification.sent and .failed on and off; CPU of the worker "
        "and of PostgreSQL per delivery, claim to completion (the worker's and PostgreSQL's "
        "share in brackets), at each settings profile.",
        "",
    ]
    out += _table(
        ["path", "events on", "events off", "cost", "PostgreSQL's added CPU"],
        [
            [
                "request (calls/s)",
                _num(request["calls_per_s_events_on"], 0),
                _num(request["calls_per_s_events_off"], 0),
                f"{request['cost_pct']:.1f}%",
                "",
            ],
            *(
                [
                    f"delivery, {d['profile']} (CPU µs/delivery)",
                    f"{_num(d['cpu_us_per_delivery_events_on'], 0)} ({_split(d['split_on'])})",
                    f"{_num(d['cpu_us_per_delivery_events_off'], 0)} ({_split(d['split_off'])})",
                    f"{(d['ratio'] - 1) * 100:+.1f}%",
                    f"{_num(d['pg_added_us'], 0)} µs ({d['pg_added_pct']:+.1f}%)",
                ]
                for d in delivery
            ),
        ],
    )
    out += [
        "",
        "Webhooks: one endpoint subscribed to verification.created, a backlog of "
        "verifications without emails committed at once, one worker process posting to a "
        "receiver on loopback that answers at once; "
        "webhooks per second from the commit to the last received, and each event's time "
        "from its commit to its webhook's arrival (ms).",
        "",
    ]
    rows = [
        [
            h["profile"],
            _num(h["rows"], 0),
            _num(h["webhooks_per_s"], 0),
            _p50_p99(h["event_to_receipt_ms"] or None),
            str(h["duplicates"]),
        ]
        for h in events["webhooks"]
    ]
    out += _table(["settings", "webhooks", "webhooks/s", "p50 / p99 ms", "duplicates"], rows)
    return out


def _split(rounds: list[list[float]]) -> str:
    """The median round's worker and PostgreSQL µs, as "worker + PostgreSQL"."""
    worker = statistics.median(r[0] for r in rounds)
    pg = statistics.median(r[1] for r in rounds)
    return f"{worker:,.0f} + {pg:,.0f}"


def _p50_p99(dist: dict[str, Any] | None) -> str:
    return "-" if dist is None else f"{_ms(dist['p50'])} / {_ms(dist['p99'])}"


def _sustained_md(sustained: dict[str, Any] | None) -> list[str]:
    if not sustained:
        return []
    out = [
        "## Sustained load",
        "",
        "One kept-alive connection, `GET /healthz` back to back (each sent when the last was "
        "answered): a server without TCP_NODELAY makes every answer after the first wait for "
        "the client's delayed ACK (about 40 ms), so even the fastest tenth takes that long. ms:",
        "",
    ]
    stall = {True: "**stalled**", False: "no", None: "-"}
    rows = [
        [
            p["server"],
            str(p["requests"]),
            _ms(p.get("p10_ms")),
            *_percentiles(p["request_ms"]),
            stall[p["stalled"]],
        ]
        for p in sustained.get("probes", [])
    ]
    out += _table(["server", "requests", "p10", "p50", "p90", "p99", "max", "stall"], rows)
    out += [
        f"{sustained['producers']} producers (library) or "
        f"{sustained.get('http_connections', sustained['producers'])} (http), each on a "
        "connection of its own, request "
        "verifications at a fixed offered rate (their schedules interleaved) or as fast as "
        "they go, through `request_verification` (library) or `POST /v1/verifications` on "
        "kept-alive connections (http, spread over the API processes); worker processes at "
        f"library defaults deliver over SMTP into {sustained.get('sink') or 'a sink'}. "
        "Latencies run from the producer's clock when COMMIT returned (library) or the 202 "
        "arrived (http) to the worker's clock when its claim came back committed and when the "
        "sink's 250 after DATA came back; ms, p50 / p99. The backlog is rows committed but not "
        "yet completed; its trend is a least-squares slope over the window, and *drained* is "
        "how long the rest took once the producers stopped.",
        "",
    ]
    rows = []
    for r in sustained.get("runs", []):
        offered = "max" if r["offered_per_s"] is None else _num(r["offered_per_s"], 0)
        queue = r["backlog"]
        drained = "-" if queue["drained_s"] is None else f"{queue['drained_s']:.2f}"
        rows.append(
            [
                r["producer"],
                offered,
                str(r["workers"]),
                "-" if r["api_processes"] is None else str(r["api_processes"]),
                _num(r["seconds"], 0),
                _num(r["achieved_per_s"], 0),
                _p50_p99(r["commit_to_claim_committed_ms"]),
                _p50_p99(r["commit_to_smtp_ms"]),
                _p50_p99(r["request_to_202_ms"]),
                f"{queue['max']} / {_num(queue['slope_per_s'], 1)} / {drained}",
                _num(r.get("round_trips_per_call"), 1),
                f"{r['delivered']}/{r['produced']}",
                r["verdict"] if r["kept_up"] else f"**{r['verdict']}**",
            ]
        )
    out += _table(
        [
            "producer",
            "offered/s",
            "workers",
            "API",
            "s",
            "achieved/s",
            "claim committed",
            "SMTP accepted",
            "request -> 202",
            "backlog max / trend per s / drained s",
            "round trips per request",
            "delivered",
            "",
        ],
        rows,
    )
    out += [
        "For comparison, commit -> claim statement start (`claimed_at`), p50 / p99 ms: "
        + ", ".join(
            f"{r['name']} {_p50_p99(r['commit_to_claim_statement_ms'])}"
            for r in sustained.get("runs", [])
        )
        + ".",
        "",
    ]
    return out


# -- plots -----------------------------------------------------------------------------------


def _cdf(encoded: str) -> tuple[list[float], list[float]]:
    from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]

    histogram = HdrHistogram.decode(encoded)
    total = histogram.get_total_count()
    xs: list[float] = []
    ys: list[float] = []
    seen = 0
    for item in histogram.get_recorded_iterator():
        seen += item.count_added_in_this_iter_step
        # A log axis has no zero: values recorded as 0 are drawn at 1 us.
        xs.append(max(item.value_iterated_to, 1) / 1000)
        ys.append(seen / total)
    return xs, ys


def _short(profile: str) -> str:
    """A profile name short enough for a bar label: "concurrency 200, batch 200" -> "c200 b200"."""
    return " ".join(word[0] + number for word, number in re.findall(r"([a-z]+) (\d+)", profile))


def plot(results: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[Path] = []
    if results.get("latency"):
        written += _plot_latency(results["latency"], out_dir, plt)
    if results.get("throughput"):
        written += _plot_throughput(results["throughput"], out_dir, plt)
    sustained = results.get("sustained")
    if sustained and sustained.get("runs"):
        written += _plot_backlog(sustained, out_dir, plt)
    return written


def _plot_latency(latency: dict[str, Any], out_dir: Path, plt: Any) -> list[Path]:
    written: list[Path] = []
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    floor = latency["floor"]["commit_to_notification_ms"]
    for ax, key, title in (
        (axes[0], "commit_to_claim_ms", "commit -> claim"),
        (axes[1], "commit_to_smtp_ms", "commit -> SMTP accepted"),
    ):
        if floor:
            xs, ys = _cdf(floor["hdr"])
            ax.step(xs, ys, where="post", color="black", linestyle="--", label="LISTEN floor")
        for mode in latency["modes"]:
            if mode[key]:
                xs, ys = _cdf(mode[key]["hdr"])
                ax.step(xs, ys, where="post", label=mode["mode"])
        ax.set_xscale("log")
        # Below 10 us there is nothing but the few samples recorded as 0 (see `negative`).
        ax.set_xlim(left=0.01)
        ax.set_xlabel("latency (ms, log scale)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="lower right")
    axes[0].set_ylabel("fraction of deliveries")
    fig.suptitle(f"Latency CDF at {latency['rate_per_s']:.0f}/s")
    fig.tight_layout()
    written.append(out_dir / LATENCY_PLOT)
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(9, 4.5))
    names = [m["mode"] for m in latency["modes"]]
    idle = [
        m["idle"]["statements_per_s"] or m["idle"]["round_trips_per_s"] for m in latency["modes"]
    ]
    load = [
        m["load"]["statements_per_s"] or m["load"]["round_trips_per_s"] for m in latency["modes"]
    ]
    positions = list(range(len(names)))
    ax.bar([p - 0.2 for p in positions], idle, 0.4, label="idle")
    ax.bar([p + 0.2 for p in positions], load, 0.4, label=f"{latency['rate_per_s']:.0f}/s")
    ax.set_xticks(positions, names)
    ax.set_yscale("log")
    ax.set_ylabel("worker statements per second (log)")
    ax.set_title("What each mode asks of PostgreSQL")
    ax.legend()
    ax.grid(True, axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    written.append(out_dir / COST_PLOT)
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    return written


def _plot_throughput(throughput: dict[str, Any], out_dir: Path, plt: Any) -> list[Path]:
    written: list[Path] = []
    labels: list[str] = []
    values: list[float] = []
    colors: list[str] = []
    palette = {"null": "tab:blue", "smtp": "tab:orange", "bare": "tab:gray"}
    for d in throughput["drains"]:
        suffix = "" if d["profile"] == "defaults" else "\n" + _short(d["profile"])
        labels.append(f"{d['transport']}\n{d['processes']} proc{suffix}")
        values.append(d["deliveries_per_s"] or 0)
        colors.append(palette[d["transport"]])
    for b in throughput.get("smtp_baseline") or []:
        labels.append(f"bare aiosmtplib\n{b['processes']} proc")
        values.append(b["messages_per_s"])
        colors.append(palette["bare"])
    fig, ax = plt.subplots(figsize=(max(8, 1.2 * len(labels)), 5))
    bars = ax.bar(range(len(values)), values, color=colors)
    ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], fontsize=8)
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel("deliveries (messages) per second")
    ax.set_title(f"Draining {throughput['rows']:,} rows: null transport, SMTP sink, bare client")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    written.append(out_dir / THROUGHPUT_PLOT)
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    return written


def _plot_backlog(sustained: dict[str, Any], out_dir: Path, plt: Any) -> list[Path]:
    written: list[Path] = []
    producers = ("library", "http")
    fig, axes = plt.subplots(1, len(producers), figsize=(14, 5), sharey=True)
    for ax, producer in zip(axes, producers, strict=True):
        for r in sustained["runs"]:
            if r["producer"] != producer:
                continue
            samples = r["backlog"]["samples"]
            label = r["name"] + ("" if r["kept_up"] else " (behind)")
            (line,) = ax.plot([t for t, _ in samples], [rows for _, rows in samples], label=label)
            # Where the producers stopped: the rest of the line is the drain.
            stop = r["backlog"]["stop_s"]
            at_stop = r["backlog"]["at_stop"]
            ax.plot([stop], [at_stop], marker="o", color=line.get_color(), markersize=4)
        ax.set_yscale("symlog", linthresh=10)
        ax.set_xlabel("seconds since the producers started (dot: they stopped)")
        ax.set_title(f"{producer} producers")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    axes[0].set_ylabel("rows committed, not yet completed (symlog)")
    fig.suptitle("Backlog over time under sustained load")
    fig.tight_layout()
    written.append(out_dir / BACKLOG_PLOT)
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    return written


# -- files -----------------------------------------------------------------------------------


def write(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """results.json, summary.md and the plots in `out_dir`; the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results["schema_version"] = SCHEMA_VERSION
    results["targets"] = evaluate_targets(results)
    json_path = out_dir / JSON_NAME
    json_path.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    summary = out_dir / SUMMARY_NAME
    summary.write_text(markdown(results) + "\n", encoding="utf-8")
    return [json_path, summary, *plot(results, out_dir)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Re-render a results.json's summary and plots.")
    parser.add_argument("results", type=Path)
    args = parser.parse_args(argv)
    results = json.loads(args.results.read_text(encoding="utf-8"))
    for path in write(results, args.results.parent):
        print(path)


if __name__ == "__main__":
    main()
