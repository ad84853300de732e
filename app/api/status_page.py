"""The status page as one self-contained HTML document: inline CSS, an inline SVG chart, no
script and no external asset (it must render on a cluster without internet access). It reloads
itself every 15 seconds. Every value is escaped: worker names and hostnames come from the
machines that registered them."""

from __future__ import annotations

import time
from html import escape
from typing import Any

REFRESH_SECONDS = 15
# Outcomes in the order they are stacked and listed; colours group them by meaning.
OUTCOME_COLOURS = {
    "correct": "#2e7d32", "partial": "#9ccc65", "incorrect": "#ef8f00", "unit_mismatch": "#ffcc80",
    "no_answer": "#b0bec5", "invalid_request": "#78909c", "timeout": "#8e24aa", "memory": "#ce93d8",
    "sandbox_error": "#c62828", "judge_error": "#ad1457", "error": "#4e0000",
}
CSS = """
:root{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#1c2430;background:#f3f5f8}
body{margin:0}header{background:#1c2430;color:#fff;padding:12px 24px;display:flex;gap:18px;align-items:center;
flex-wrap:wrap}header h1{font-size:20px;margin:0 12px 0 0}header a{color:#9fd0ff;margin-right:12px}
.badge{display:inline-block;padding:2px 10px;border-radius:10px;font-size:13px;font-weight:600}
.ok{background:#2e7d32;color:#fff}.bad{background:#c62828;color:#fff}.info{background:#37474f;color:#fff}
main{padding:16px 24px;display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:16px}
section{background:#fff;border-radius:8px;padding:12px 16px;box-shadow:0 1px 3px rgba(0,0,0,.12)}
section.wide{grid-column:1/-1}h2{font-size:15px;margin:0 0 8px;text-transform:uppercase;letter-spacing:.04em;
color:#455a64}table{border-collapse:collapse;width:100%;font-size:14px}th,td{text-align:left;padding:4px 8px;
border-bottom:1px solid #e3e7ec}th{color:#607d8b;font-weight:600}td.n,th.n{text-align:right;
font-variant-numeric:tabular-nums}.muted{color:#78909c}.big{font-size:28px;font-weight:700}
.legend span{display:inline-block;margin-right:12px;font-size:13px}.legend i{display:inline-block;width:10px;
height:10px;margin-right:4px;border-radius:2px}footer{padding:0 24px 16px;color:#78909c;font-size:12px}
"""


def _ago(seconds: float | None, now: float) -> str:
    if seconds is None:
        return "-"
    delta = max(0, int(now - seconds))
    return f"{delta} s ago" if delta < 120 else f"{delta // 60} min ago"


def _badge(ok: bool, yes: str, no: str) -> str:
    return f'<span class="badge {"ok" if ok else "bad"}">{escape(yes if ok else no)}</span>'


def _table(headers: list[str], rows: list[list[str]], numeric: frozenset[int] = frozenset()) -> str:
    head = "".join(f'<th{" class=n" if i in numeric else ""}>{escape(h)}</th>' for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f'<td{" class=n" if i in numeric else ""}>{cell}</td>' for i, cell in enumerate(row))
        + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _splits(status: dict[str, Any]) -> str:
    rows = []
    for split in status["splits"]:
        size = "unlimited" if split["available"] and split["size"] is None else str(split["size"] or "-")
        kinds = ", ".join(f"{escape(k)} {n}" for k, n in sorted(split["grading"].items()) if isinstance(n, int))
        kinds = kinds or ", ".join(escape(k) for k in split["grading"])
        state = "" if split["available"] else ' <span class="badge bad">source unavailable</span>'
        rows.append([f"<b>{escape(split['name'])}</b>{state}", escape(size), kinds or "-"])
    return _table(["split", "tasks", "grading"], rows, frozenset({1}))


OPERATOR_ONLY = '<p class="muted">Shown to the operator only; this page shows your own grades.</p>'


def _queues(status: dict[str, Any]) -> str:
    if status.get("view") == "tenant":
        return OPERATOR_ONLY
    if status["queues"] is None:
        return '<p class="muted">Embedded mode: judge and impl grading run in threads of this process.</p>'
    rows = [[f"<b>{escape(name)}</b>", str(d["queued"]), str(d["started"]), str(d["failed"]),
             "-" if d.get("oldest_seconds") is None else f"{d['oldest_seconds']:.0f} s"]
            for name, d in status["queues"].items()]
    refused = ", ".join(f"{escape(reason)} {n}" for reason, n in (status.get("refused") or {}).items())
    return (_table(["queue", "waiting", "running", "failed", "next job waited"], rows, frozenset({1, 2, 3, 4}))
            + f'<p class="muted">429 refusals in the last five minutes: {refused or "none"}</p>')


def _workers(status: dict[str, Any], now: float) -> str:
    if status.get("view") == "tenant":
        return OPERATOR_ONLY
    workers = status["workers"]
    if workers is None:
        sandbox = status["checks"].get("sandbox", {}).get("info") or {}
        tier = sandbox.get("tier") if isinstance(sandbox, dict) else None
        return (f'<p class="muted">Embedded mode: no separate workers. Sandbox tier in this process: '
                f'<b>{escape(str(tier or "not probed"))}</b>.</p>')
    if not workers:
        return '<p><span class="badge bad">no live worker</span> queued judge and impl grades will wait.</p>'
    rows = []
    for w in workers:
        job = w["current_job"]
        doing = "idle" if job is None else (
            f"{escape(str(job['kind'] or 'job'))} <code>{escape(job['id'][:12])}</code> "
            f"{'' if job['running_seconds'] is None else escape(str(job['running_seconds'])) + ' s'}")
        rows.append([f"<b>{escape(w['name'])}</b><br><span class=muted>{escape(str(w['hostname']))} "
                     f"pid {escape(str(w['pid']))}</span>", escape(w["state"]), escape(",".join(w["queues"])),
                     escape(str(w["sandbox_tier"] or "unknown")), doing, _ago(w["last_heartbeat"], now),
                     f"{w['successful_jobs']} / {w['failed_jobs']}"])
    return (f'<p><span class="big">{len(workers)}</span> live worker{"s" if len(workers) != 1 else ""}</p>'
            + _table(["worker", "state", "queues", "sandbox tier", "current job", "heartbeat", "done / failed"],
                     rows, frozenset({6})))


def _chart(grades: dict[str, Any]) -> str:
    buckets, seconds = grades["buckets"], grades["bucket_seconds"]
    width, height, left, bottom = 860, 200, 44, 22
    peak = max([sum(b["by_outcome"].values()) / seconds for b in buckets] + [0.1])
    bar = (width - left) / len(buckets)
    parts = []
    for i, b in enumerate(buckets):
        y = height - bottom
        for outcome in OUTCOME_COLOURS:
            rate = b["by_outcome"].get(outcome, 0) / seconds
            if rate:
                h = rate / peak * (height - bottom - 8)
                y -= h
                parts.append(f'<rect x="{left + i * bar + 1:.1f}" y="{y:.1f}" width="{bar - 2:.1f}" height="{h:.1f}" '
                             f'fill="{OUTCOME_COLOURS[outcome]}"><title>{escape(outcome)}: {rate:.2f}/s</title></rect>')
    axis = (f'<line x1="{left}" y1="{height - bottom}" x2="{width}" y2="{height - bottom}" stroke="#90a4ae"/>'
            f'<text x="{left - 6}" y="14" text-anchor="end" font-size="11">{peak:.2g}/s</text>'
            f'<text x="{left - 6}" y="{height - bottom}" text-anchor="end" font-size="11">0</text>'
            f'<text x="{left}" y="{height - 6}" font-size="11">-{grades["window_seconds"] // 60} min</text>'
            f'<text x="{width}" y="{height - 6}" text-anchor="end" font-size="11">now</text>')
    seen = {o for b in buckets for o in b["by_outcome"]}
    legend = "".join(f'<span><i style="background:{c}"></i>{escape(o)}</span>'
                     for o, c in OUTCOME_COLOURS.items() if o in seen)
    return (f'<svg id="grade-chart" viewBox="0 0 {width} {height}" width="100%" role="img" '
            f'aria-label="grades per second by outcome">{axis}{"".join(parts)}</svg>'
            f'<div class="legend">{legend or "<span class=muted>no grades in the window</span>"}</div>')


def _grade_table(grades: dict[str, Any]) -> str:
    by_split = grades["by_split"]
    outcomes = [o for o in OUTCOME_COLOURS if any(o in row for row in by_split.values())]
    window = grades["window_seconds"]
    rows = []
    for split, row in sorted(by_split.items()):
        total = sum(row.values())
        rows.append([f"<b>{escape(split)}</b>", *(str(row.get(o, 0)) for o in outcomes), str(total),
                     f"{total / window:.3f}"])
    numeric = frozenset(range(1, len(outcomes) + 3))
    return _table(["split", *outcomes, "total", "per s"], rows, numeric) if rows else ""


def _faults(status: dict[str, Any], now: float) -> str:
    if not status["faults"]:
        return '<p class="muted">No grader fault or server error recorded.</p>'
    counts: dict[str, int] = {}
    for f in status["faults"]:
        counts[f["kind"]] = counts.get(f["kind"], 0) + 1
    summary = " ".join(f'<span class="badge bad">{escape(k)} × {n}</span>' for k, n in sorted(counts.items()))
    rows = [[_ago(f["at"], now), escape(f["kind"]), escape(f["where"])] for f in status["faults"]]
    return f"<p>{summary}</p>" + _table(["when", "kind", "where"], rows)


def _checks(status: dict[str, Any]) -> str:
    if status.get("view") == "tenant":
        return OPERATOR_ONLY
    rows = []
    for name, check in status["checks"].items():
        info = check["info"]
        text = info if isinstance(info, str) else ", ".join(
            f"{k}: {v}" for k, v in info.items() if not isinstance(v, list | dict)) if isinstance(info, dict) else ""
        rows.append([escape(name), _badge(check["ok"], "ok", "failing"), escape(str(text))])
    return _table(["check", "state", "detail"], rows)


def render_status(status: dict[str, Any]) -> str:
    now = status["generated_at"]
    grades = status["grades"]
    total = sum(sum(row.values()) for row in grades["by_split"].values())
    redis_error = (f'<section class="wide"><span class="badge bad">{escape(status["redis_error"])}</span></section>'
                   if status["redis_error"] else "")
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now))
    counted = "deployment: every API process and worker" if status["mode"] == "redis" else "service"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="{REFRESH_SECONDS}"><title>scaling-grader status</title>
<style>{CSS}</style></head><body>
<header><h1>scaling-grader</h1><span>version <b id="version">{escape(status["version"])}</b></span>
<span class="badge info" id="mode">{escape(status["mode"])} mode</span>
<span id="ready">{_badge(status["ready"], "ready", "not ready")}</span>
<span style="flex:1"></span><a href="docs">API docs</a><a href="redoc">API reference</a>
<a href="metrics">metrics</a><a href="readyz">readyz</a><a href="v1/status">status JSON</a></header>
<main>{redis_error}
<section id="splits"><h2>Splits</h2>{_splits(status)}</section>
<section id="queues"><h2>Queues</h2>{_queues(status)}</section>
<section id="workers" class="wide"><h2>Workers</h2>{_workers(status, now)}</section>
<section id="grades" class="wide"><h2>Grades per second, last {grades["window_seconds"] // 60} minutes
<span class="muted">({total} graded)</span></h2>{_chart(grades)}{_grade_table(grades)}</section>
<section id="faults"><h2>Last errors</h2>{_faults(status, now)}</section>
<section id="checks"><h2>Readiness</h2>{_checks(status)}</section>
</main><footer>Generated {stamp}; reloads every {REFRESH_SECONDS} s. Grades are counted once for the
whole {counted}.</footer></body></html>"""
