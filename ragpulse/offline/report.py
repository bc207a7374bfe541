"""Replay reports: a Markdown page, a JSON summary and (optionally) an HTML page.

A set selected by outcome says so under the verdict; a control (``--control``) adds
its tables after the scores.

Everything is rendered from the summary :func:`ragpulse.offline.replay.summarize`
builds, so the three always agree. The HTML page is self-contained: one inline
SVG histogram per metric/method (before and after, ten bins over [0, 1]),
generated here without a plotting dependency.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

BEFORE_COLOR = "#5b84b1"
AFTER_COLOR = "#e0782f"


def report_paths(output: Path, report_dir: Path | None, with_html: bool) -> dict[str, Path]:
    """``<report_dir>/<output stem>.report.md`` / ``.summary.json`` / ``.report.html``."""
    directory = report_dir if report_dir is not None else output.parent
    stem = output.stem
    paths = {
        "markdown": directory / f"{stem}.report.md",
        "summary": directory / f"{stem}.summary.json",
    }
    if with_html:
        paths["html"] = directory / f"{stem}.report.html"
    return paths


def write_reports(
    summary: Mapping[str, Any], output: Path, report_dir: Path | None, with_html: bool
) -> dict[str, Path]:
    paths = report_paths(output, report_dir, with_html)
    next(iter(paths.values())).parent.mkdir(parents=True, exist_ok=True)
    paths["summary"].write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    paths["markdown"].write_text(markdown(summary), encoding="utf-8")
    if "html" in paths:
        paths["html"].write_text(html_page(summary), encoding="utf-8")
    return paths


# --- Formatting ---------------------------------------------------------------------------


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def clip(text: str, limit: int = 80) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def verdict(summary: Mapping[str, Any]) -> str:
    if not summary.get("thresholds"):
        return "no thresholds set"
    return "passed" if summary.get("passed") else "FAILED"


def score_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for m in summary["metrics"]:
        direction = "" if m["higher_is_better"] else " (lower is better)"
        if m.get("selected_on"):
            direction += " (the set was selected on it)"
        rows.append(
            [
                m["evaluator"] + direction,
                str(m["paired"]),
                fmt(m["mean_before"]),
                fmt(m["mean_after"]),
                signed(m["delta"]),
                f"{m['improved']} ({share(m['improved_share'])})",
                f"{m['regressed']} ({share(m['regressed_share'])})",
                str(m["after_not_applicable"]),
                str(m["after_errors"]),
            ]
        )
    return rows


SCORE_HEADER = [
    "evaluator",
    "paired",
    "mean before",
    "mean after",
    "delta",
    "improved",
    "regressed",
    "after n/a",
    "after errors",
]
THRESHOLD_HEADER = ["rule", "evaluator", "drop", "max drop", "status"]
CONTROL_HEADER = ["evaluator", "paired", "mean before", "mean after", "delta", "improved",
                  "regressed"]  # fmt: skip


def selection_line(summary: Mapping[str, Any]) -> str | None:
    """Said when the replayed rows were picked for a bad score or outcome."""
    biased = [s for s in summary.get("selection") or [] if s.get("biased")]
    if not biased:
        return None
    rules = "; ".join(f"set {s['set'] or '-'}: {s['rule']} ({s['rows']} rows)" for s in biased)
    fair = (
        "the control below is the fair comparison"
        if summary.get("control")
        else "compare with --control (the unchanged pipeline, or a random sample of live "
        "traffic such as the baseline set)"
    )
    return (
        f"Selected by outcome: {rules}. Rows picked for a low score score higher on a second "
        f"look even through an unchanged pipeline (regression to the mean): {fair}."
    )


def _control_table(metrics: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    return [
        [m["evaluator"] + ("" if m["higher_is_better"] else " (lower is better)"),
         str(m["paired"]), fmt(m["mean_before"]), fmt(m["mean_after"]), signed(m["delta"]),
         f"{m['improved']} ({share(m['improved_share'])})",
         f"{m['regressed']} ({share(m['regressed_share'])})"]
        for m in metrics
    ]  # fmt: skip


def control_rows(summary: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The control's tables: (title, header, rows)."""
    control = summary.get("control")
    if not isinstance(control, Mapping):
        return []
    if control["kind"] == "pipeline":
        return [
            (f"Control: the same rows through {control['control']} (recorded -> control)",
             CONTROL_HEADER, _control_table(control["metrics"])),
            ("Change net of the control (control -> changed pipeline, same rows; the "
             "thresholds judge this)", CONTROL_HEADER, _control_table(control["net"]["metrics"])),
        ]  # fmt: skip
    return [
        (f"Control: the set {control['control']} through the changed pipeline "
         f"({control['replayed']} of {control['rows']} rows replayed; recorded -> after)",
         CONTROL_HEADER, _control_table(control["metrics"])),
    ]  # fmt: skip


WORST_HEADER = ["trace id", "line", "evaluator", "before", "after", "question"]


def threshold_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    return [
        [
            t["rule"] + (" (against the control)" if t.get("against") == "control" else ""),
            t["evaluator"] or "-",
            signed(t["drop"]),
            fmt(t["max_drop"]),
            ("EXCEEDED" if t["exceeded"] else "ok") + (f" ({t['note']})" if t.get("note") else ""),
        ]
        for t in summary["thresholds"]
    ]


def worst_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    return [
        [
            w["trace_id"] or "-",
            str(w["line"]),
            w["evaluator"],
            fmt(w["before"]),
            fmt(w["after"]),
            clip(w["question"]),
        ]
        for w in summary["worst_regressions"]
    ]


def count(n: int, thing: str, things: str | None = None) -> str:
    """``1 replay error``, ``2 replay errors``."""
    return f"{n} {thing if n == 1 else (things or thing + 's')}"


def headline(summary: Mapping[str, Any]) -> str:
    return (
        f"{summary['replayed']} of {count(summary['rows'], 'row')} replayed with "
        f"`{summary.get('replay', '?')}`; {count(summary['replay_errors'], 'replay error')}, "
        f"{count(summary['skipped_no_question'], 'row')} without a question, "
        f"{count(summary['unreadable_lines'], 'unreadable line')}. A paired score that moves by "
        f"more than {summary['change_threshold']:g} counts as improved or regressed."
    )


# --- Markdown -----------------------------------------------------------------------------


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table; cells on one line, pipes escaped."""

    def cell(text: str) -> str:
        return " ".join(text.split()).replace("|", "\\|")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def markdown(summary: Mapping[str, Any]) -> str:
    parts = [
        f"# Replay report: {summary.get('input', '')}",
        "",
        headline(summary),
        "",
        f"Output: `{summary.get('output', '')}`. Generated {summary['generated_at']}.",
        "",
        f"**Thresholds: {verdict(summary)}**",
        *(["", f"**{line}**"] if (line := selection_line(summary)) else []),
        "",
        "## Scores (paired rows)",
        "",
        md_table(SCORE_HEADER, score_rows(summary)) if summary["metrics"] else "No scores.",
    ]
    for title, header, rows in control_rows(summary):
        parts += ["", f"## {title}", "", md_table(header, rows)]
    if summary["thresholds"]:
        parts += ["", "## Thresholds", "", md_table(THRESHOLD_HEADER, threshold_rows(summary))]
    against = " against the control" * (summary.get("regressions_against") == "control")
    parts += ["", f"## Worst regressions{against} ({summary['regressions']} in all)", ""]
    if summary["worst_regressions"]:
        parts.append(md_table(WORST_HEADER, worst_rows(summary)))
    else:
        parts.append("None.")
    if summary["error_examples"]:
        parts += ["", f"## Replay errors ({summary['replay_errors']})", ""]
        parts += [
            f"- line {e['line']} (trace `{e['trace_id'] or '-'}`): {clip(e['error'], 200)}"
            for e in summary["error_examples"]
        ]
    return "\n".join(parts) + "\n"


# --- HTML ---------------------------------------------------------------------------------


def html_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """An HTML table, every cell escaped."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def histogram_svg(metric: Mapping[str, Any], width: int = 440, height: int = 250) -> str:
    """Before/after score histogram of one metric/method as an inline SVG."""
    hist = metric["histogram"]
    before, after, edges = hist["before"], hist["after"], hist["edges"]
    left, right, top, bottom = 44, 12, 52, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max([*before, *after, 1])
    bins = len(before)
    slot = plot_w / bins
    bar = slot * 0.38
    name = html.escape(metric["evaluator"])
    title = name + ("" if metric["higher_is_better"] else " (lower is better)")
    sub = f"mean {fmt(metric['mean_before'])} → {fmt(metric['mean_after'])}, n = {metric['paired']}"
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{name} score histogram" '
        'font-family="system-ui, sans-serif" font-size="11">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{left}" y="16" font-size="13" font-weight="600">{title}</text>',
        f'<text x="{left}" y="32" fill="#555">{html.escape(sub)}</text>',
    ]
    # Legend, top right.
    lx = width - right - 120
    for i, (label, color) in enumerate((("before", BEFORE_COLOR), ("after", AFTER_COLOR))):
        legend_x = lx + i * 62
        out.append(f'<rect x="{legend_x}" y="8" width="10" height="10" fill="{color}"/>')
        out.append(f'<text x="{legend_x + 14}" y="17">{label}</text>')
    # Y grid and ticks.
    for frac in (0, 0.5, 1):
        y = top + plot_h - frac * plot_h
        value = peak * frac
        label = f"{value:.0f}" if value == int(value) else f"{value:.1f}"
        out.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e3e3e3"/>'
        )
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    # Bars.
    for i in range(bins):
        x0 = left + i * slot + (slot - 2 * bar) / 2
        lo, hi = edges[i], edges[i + 1]
        for j, (counts, color, label) in enumerate(
            ((before, BEFORE_COLOR, "before"), (after, AFTER_COLOR, "after"))
        ):
            h = counts[i] / peak * plot_h
            x = x0 + j * bar
            y = top + plot_h - h
            out.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                f'fill="{color}"><title>{label} {lo:.1f}-{hi:.1f}: {counts[i]}</title></rect>'
            )
    # X axis.
    base = top + plot_h
    out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{base}" y2="{base}" stroke="#333"/>')
    for i in range(0, bins + 1, 2):
        x = left + i * slot
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{base}" y2="{base + 4}" stroke="#333"/>')
        out.append(f'<text x="{x:.1f}" y="{base + 16}" text-anchor="middle">{edges[i]:.1f}</text>')
    out.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" text-anchor="middle" '
        'fill="#555">score</text>'
    )
    if not metric["paired"]:
        out.append(
            f'<text x="{left + plot_w / 2:.1f}" y="{top + plot_h / 2:.1f}" '
            'text-anchor="middle" fill="#999">no paired scores</text>'
        )
    out.append("</svg>")
    return "".join(out)


CSS = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; max-width: 1100px; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; font-size: 0.9rem; }
th, td { border: 1px solid #ddd; padding: 0.3rem 0.6rem; text-align: right; }
th:first-child, td:first-child, td:last-child { text-align: left; }
th { background: #f5f5f5; }
.charts { display: flex; flex-wrap: wrap; gap: 1rem; }
.charts figure { margin: 0; border: 1px solid #eee; }
.passed { color: #1a7f37; } .failed { color: #c62828; } .none { color: #555; }
.warn { color: #8a5300; }
"""
"""The reports' style sheet (the replay report's and the harness report's)."""


def html_page(summary: Mapping[str, Any]) -> str:
    status = verdict(summary)
    css_class = {"passed": "passed", "FAILED": "failed"}.get(status, "none")
    charts = "".join(f"<figure>{histogram_svg(m)}</figure>" for m in summary["metrics"])
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Replay report: {html.escape(str(summary.get('input', '')))}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>Replay report: {html.escape(str(summary.get('input', '')))}</h1>",
        f"<p>{html.escape(headline(summary).replace('`', ''))}</p>",
        f"<p>Output: <code>{html.escape(str(summary.get('output', '')))}</code>. "
        f"Generated {html.escape(summary['generated_at'])}.</p>",
        f'<p class="{css_class}"><strong>Thresholds: {html.escape(status)}</strong></p>',
        *(
            [f'<p class="warn"><strong>{html.escape(line)}</strong></p>']
            if (line := selection_line(summary))
            else []
        ),
        "<h2>Scores (paired rows)</h2>",
        html_table(SCORE_HEADER, score_rows(summary)),
        *(
            f"<h2>{html.escape(title)}</h2>{html_table(header, rows)}"
            for title, header, rows in control_rows(summary)
        ),
        "<h2>Score distributions</h2>",
        f'<div class="charts">{charts}</div>',
    ]
    if summary["thresholds"]:
        parts += ["<h2>Thresholds</h2>", html_table(THRESHOLD_HEADER, threshold_rows(summary))]
    parts.append(f"<h2>Worst regressions ({summary['regressions']} in all)</h2>")
    parts.append(
        html_table(WORST_HEADER, worst_rows(summary))
        if summary["worst_regressions"]
        else "<p>None.</p>"
    )
    if summary["error_examples"]:
        parts.append(f"<h2>Replay errors ({summary['replay_errors']})</h2><ul>")
        parts += [
            f"<li>line {e['line']} (trace <code>{html.escape(e['trace_id'] or '-')}</code>): "
            f"{html.escape(clip(e['error'], 200))}</li>"
            for e in summary["error_examples"]
        ]
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
