"""The sliced report of a harness run: JSON summary, Markdown, self-contained HTML, console.

Everything renders from the summary :func:`ragpulse.offline.slices.sliced_summary` builds, so
the formats agree. Table helpers are the replay report's (:mod:`ragpulse.offline.report`).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ragpulse.offline.report import CSS, clip, fmt, html_table, md_table, report_paths, signed

__all__ = ["html_page", "markdown", "print_sliced", "write_sliced_reports"]

# Behaviour leads: what the conditions test; then the slices' generation and retrieval.
GROUPS = ("behaviour", "generation", "retrieval", "joint", "other")
GROUP_TITLES = {
    "retrieval": "Retrieval",
    "generation": "Generation",
    "behaviour": "Behaviour (rates)",
    "joint": "Joint: answer correctness when retrieval found every gold document (top 5) or not",
    "other": "Other metrics",
}
MISSING_LABELS = {
    "no_reference": "no reference at all",
    "no_reference_answers": "no reference answers",
    "no_reference_contexts": "no reference contexts / ids",
    "no_answer": "no answer",
    "no_contexts": "no contexts",
    "row_errors": "row errors (generator / retriever failed)",
    "no_results": "no results",
}
GATE_HEADER = ["gate", "status", "checks", "worst check", "note"]
WORST_HEADER = ["slice", "row", "question id", "condition", "quality", "worst metric", "question"]
SKIPPED_HEADER = ["condition", "cases", "why (what the row lacked)"]


def write_sliced_reports(
    summary: dict[str, Any], output: Path, report_dir: Path | None, html: bool
) -> dict[str, Path]:
    """``<output stem>.summary.json`` / ``.report.md`` (/ ``.report.html``); kind -> path."""
    paths = report_paths(output, report_dir, html)
    paths["summary"].parent.mkdir(parents=True, exist_ok=True)
    paths["summary"].write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    paths["markdown"].write_text(markdown(summary), encoding="utf-8")
    if "html" in paths:
        paths["html"].write_text(html_page(summary), encoding="utf-8")
    return paths


# --- Table contents ---------------------------------------------------------------------------


def verdict(summary: Mapping[str, Any]) -> str:
    if not summary["gates"]:
        return "no gates set"
    return "passed" if summary["passed"] else "FAILED"


def headline(summary: Mapping[str, Any]) -> str:
    by = ", ".join(summary["slice_by"]) or "no metadata key"
    cond = " and by condition" if summary["by_condition"] else ""
    base = "compared with a baseline" if summary["has_baseline"] else "no baseline"
    return f"{summary['rows']} rows, {len(summary['slices'])} slices (by {by}{cond}); {base}."


def comparison_line(summary: Mapping[str, Any]) -> str | None:
    """Said when the baseline ran other conditions: what was compared, what was not."""
    c = summary.get("comparison")
    if not isinstance(c, Mapping) or c.get("same_conditions", True):
        return None
    before = ",".join(c.get("baseline_conditions") or []) or "unknown conditions"
    return (
        f"The baseline ran {before}; this run {','.join(c.get('conditions') or [])}: figures "
        f"are compared per condition only ({c.get('compared', 0)} compared, "
        f"{c.get('not_comparable', 0)} computed from other conditions not compared)."
    )


def skipped_line(summary: Mapping[str, Any]) -> str | None:
    skipped = summary.get("skipped") or {}
    if not skipped.get("cases"):
        return None
    return (
        f"{skipped['cases']} cases skipped (not generated, not scored): the row lacked what "
        "their condition needs; see Skipped cases."
    )


def skipped_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    by = (summary.get("skipped") or {}).get("by_condition") or {}
    return [
        [condition, str(n), why]
        for condition, reasons in by.items()
        for why, n in sorted(reasons.items(), key=lambda kv: -kv[1])
    ]


def _natural(name: str) -> tuple[Any, ...]:
    """recall@1 < recall@3 < recall@10 (numbers compared as numbers)."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def hidden_figures(summary: Mapping[str, Any]) -> list[str]:
    """Figures not applicable on every row of every slice: left out of the tables."""
    seen: dict[str, bool] = {}
    for info in summary["slices"].values():
        for key, fig in info["metrics"].items():
            seen[key] = seen.get(key, False) or bool(fig["n"] or fig["errors"])
    return sorted((k for k, shown in seen.items() if not shown), key=_natural)


Column = tuple[str, str]  # (label, figure key)


def _columns(summary: Mapping[str, Any], group: str) -> list[Column]:
    """The group's figures with a score somewhere; figures equal in every slice (same
    mean and n: expected_refusal and refusal_rate) merged into one column."""
    hidden = set(hidden_figures(summary))
    names = sorted(
        {
            key
            for info in summary["slices"].values()
            for key, fig in info["metrics"].items()
            if fig["group"] == group and key not in hidden
        },
        key=_natural,
    )
    by_values: dict[tuple[Any, ...], list[str]] = {}
    for key in names:
        values = tuple(
            (name, None if f["mean"] is None else round(f["mean"], 9), f["n"])
            for name, info in summary["slices"].items()
            if (f := info["metrics"].get(key)) is not None and (f["n"] or f["errors"])
        )
        by_values.setdefault((_higher(summary, key), values), []).append(key)
    out = []
    for keys in by_values.values():
        keys = sorted(keys, key=_rank)  # the name a column goes by leads its label
        out.append((" = ".join(keys), keys[0]))
    return sorted(out, key=lambda column: _natural(column[1]))


def _rank(key: str) -> tuple[int, int, tuple[Any, ...]]:
    """ids before content, the judge before lexical; recall@5 before the other cut-offs."""
    metric, _, method = key.rpartition("/")
    rank = PRIMARY_METHODS.index(method) if method in PRIMARY_METHODS else len(PRIMARY_METHODS)
    return rank, metric in CONSOLE_SKIP, _natural(key)


# A method a metric is shown by on the console when it has several (ids beats content: ids
# are exact; the judge beats lexical overlap).
PRIMARY_METHODS = ("ids", "llm_judge", "token_f1", "canary", "planted_value", "rules", "lexical")
# On the console only: the retrieval cut-offs that add little next to recall@5 and ndcg@10.
CONSOLE_SKIP = ("recall@1", "recall@3", "recall@10")
MAX_COLUMNS = 8


def _primary(columns: Sequence[Column]) -> list[Column]:
    """One method per metric: the first of PRIMARY_METHODS it has, else its first."""
    by_metric: dict[str, list[Column]] = {}
    for column in columns:
        by_metric.setdefault(column[1].rsplit("/", 1)[0], []).append(column)
    out = []
    rank = {m: i for i, m in enumerate(PRIMARY_METHODS)}
    for metric, found in by_metric.items():
        if metric in CONSOLE_SKIP:
            continue
        out.append(min(found, key=lambda c: (rank.get(c[1].rsplit("/", 1)[-1], 99), c[1])))
    return out


def _cell(fig: Mapping[str, Any] | None, compact: bool = False) -> str:
    if fig is None:
        return ""
    text = fmt(fig["mean"])
    # The terminal view leaves out changes that round to zero: the moves stand out.
    if fig.get("change") is not None and not (compact and abs(fig["delta"]) < 5e-4):
        text += f" ({signed(fig['delta'])})"
        if fig["change"] < -1e-12:
            text += " ▼"
    elif fig.get("not_comparable") and not compact:
        text += " (not compared)"
    if compact:
        return text
    extra = [f"n={fig['n']}"]
    if fig["errors"]:
        extra.append(f"err={fig['errors']}")
    return f"{text} {' '.join(extra)}"


def group_table(
    summary: Mapping[str, Any],
    columns: Sequence[Column],
    slices: Sequence[str] | None = None,
    compact: bool = False,
) -> tuple[list[str], list[list[str]]]:
    """Rows: slices with a score in one of the columns; columns: the figures (mean,
    change from the baseline, n)."""
    header = ["slice", "rows"]
    header += [label + ("" if _higher(summary, key) else " ↓") for label, key in columns]
    rows = []
    for name, info in summary["slices"].items():
        figs = info["metrics"]
        scored = any(figs.get(key, {}).get("n") or figs.get(key, {}).get("errors")
                     for _, key in columns)  # fmt: skip
        if (slices is None or name in slices) and scored:
            cells = (_cell(figs.get(key), compact) for _, key in columns)
            rows.append([name, str(info["count"]), *cells])
    return header, rows


def _column_sets(columns: Sequence[Column]) -> list[tuple[str, list[Column]]]:
    """Split a wide group by method ("ids", "content") so no table has over MAX_COLUMNS."""
    if len(columns) <= MAX_COLUMNS:
        return [("", list(columns))]
    by_method: dict[str, list[Column]] = {}
    for column in columns:
        by_method.setdefault(column[1].rsplit("/", 1)[-1], []).append(column)
    return [(f" (by {method})", found) for method, found in by_method.items()]


def _higher(summary: Mapping[str, Any], key: str) -> bool:
    for info in summary["slices"].values():
        if key in info["metrics"]:
            return bool(info["metrics"][key]["higher_is_better"])
    return True


def moved(summary: Mapping[str, Any], worse: bool) -> list[dict[str, Any]]:
    """Figures that changed from the baseline (by more than rounding), broad slices and
    the largest moves first; a merged duplicate is listed once."""
    labels = {
        member: label
        for group in GROUPS
        for label, _ in _columns(summary, group)
        for member in label.split(" = ")
    }
    out = []
    for name, info in summary["slices"].items():
        listed = set()
        for key, fig in info["metrics"].items():
            change = fig.get("change")
            if change is None or key not in labels or abs(fig["delta"]) < 5e-4:
                continue
            if (change < 0) == worse and labels[key] not in listed:
                listed.add(labels[key])
                out.append({**fig, "slice": name, "figure": labels[key], "where": info["where"]})
    # Broad slices first (all, then one key, then crossed), each largest move first: a
    # small crossed slice moving by 1.0 must not hide `all` moving by 0.2.
    out.sort(key=lambda m: (len(m["where"]), m["change"] if worse else -m["change"], m["slice"]))
    return out


MOVED_HEADER = ["slice", "figure", "baseline", "now", "change", "n"]


def moved_rows(found: Sequence[Mapping[str, Any]], limit: int) -> list[list[str]]:
    return [
        [m["slice"], m["figure"], fmt(m["baseline_mean"]), fmt(m["mean"]),
         signed(m["delta"]) + (" ▼" if m["change"] < 0 else ""), str(m["n"])]
        for m in found[:limit]
    ]  # fmt: skip


def gate_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    out = []
    for g in summary["gates"]:
        checks = g["checks"]
        failed = [c for c in checks if not c["passed"]]
        worst = failed[0] if failed else None
        worst_text = "-"
        if worst is not None:
            worst_text = f"{worst['slice']} {worst['figure']}: " + (
                f"drop {fmt(worst.get('drop'))}" if "drop" in worst else f"{fmt(worst['current'])}"
            )
        out.append(
            [g["gate"], "ok" if g["passed"] else "FAILED", str(len(checks)), worst_text,
             g["note"] or ""]
        )  # fmt: skip
    return out


def missing_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    return [[MISSING_LABELS.get(k, k), str(v)] for k, v in summary["missing"].items() if v]


def worst_rows(summary: Mapping[str, Any], slices: Sequence[str] | None = None) -> list[list[str]]:
    out = []
    for name, info in summary["slices"].items():
        if slices is not None and name not in slices:
            continue
        for w in info["worst"]:
            out.append(
                [name, str(w["row"]), str(w["question_id"] or "-"), str(w["condition"] or "-"),
                 fmt(w["quality"]), str(w["worst_metric"] or "-"), clip(w["question"])]
            )  # fmt: skip
    return out


Section = tuple[str, list[str], list[list[str]]]
MOVED_LIMIT = 20  # per direction, in the report files; the console shows half


def _lead_sections(summary: Mapping[str, Any], limit: int) -> list[Section]:
    """What moved, first: the gates, the regressions and improvements from the baseline,
    and the cases that were skipped."""
    out: list[Section] = []
    if summary["gates"]:
        out.append((f"Gates: {verdict(summary)}", GATE_HEADER, gate_rows(summary)))
    if summary["has_baseline"]:
        for worse, title in ((True, "Regressions"), (False, "Improvements")):
            found = moved(summary, worse)
            shown = f", the {limit} largest" if len(found) > limit else ""
            out.append((f"{title} from the baseline ({len(found)}{shown})", MOVED_HEADER,
                        moved_rows(found, limit)))  # fmt: skip
    if skipped_rows(summary):
        out.append(("Skipped cases", SKIPPED_HEADER, skipped_rows(summary)))
    return out


def _sections(summary: Mapping[str, Any]) -> list[Section]:
    """Everything, for the report files: what moved, behaviour, then the slices."""
    out = _lead_sections(summary, MOVED_LIMIT)
    for group in GROUPS:
        for suffix, columns in _column_sets(_columns(summary, group)):
            header, rows = group_table(summary, columns)
            if rows and columns:
                out.append((GROUP_TITLES[group] + suffix, header, rows))
    out.append((f"Missing (of {summary['rows']} rows)", ["what", "rows"], missing_rows(summary)))
    out.append(("Worst rows per slice (lowest mean quality)", WORST_HEADER, worst_rows(summary)))
    return out


# The console shows every slice up to this many; past it, the overall and one-key slices.
CONSOLE_SLICES = 24


def _console_sections(summary: Mapping[str, Any]) -> list[Section]:
    """A terminal-sized view: one method per metric, fewer slices, worst rows overall."""
    names = list(summary["slices"])
    slices = names
    if len(names) > CONSOLE_SLICES:
        slices = [n for n, info in summary["slices"].items() if len(info["where"]) <= 1]
    out = _lead_sections(summary, MOVED_LIMIT // 2)
    for group in GROUPS:
        columns = _primary(_columns(summary, group))
        header, rows = group_table(summary, columns, slices, compact=True)
        if rows and columns:
            out.append((GROUP_TITLES[group], header, rows))
    missing = missing_rows(summary)
    if missing:
        out.append((f"Missing (of {summary['rows']} rows)", ["what", "rows"], missing))
    out.append(("Worst rows overall", WORST_HEADER, worst_rows(summary, ["all"])))
    return out


# --- Renderers --------------------------------------------------------------------------------

LEGEND = (
    "Cells: mean (change from the baseline) n=scored rows; ▼ marks a change for the worse; "
    "↓ marks a figure where lower is better. Like with like: retrieval and joint figures "
    "come from the retrieved rows only; in `all` and the metadata slices generation figures "
    "do too (the system as it runs), each condition=... slice has its own; behaviour "
    "figures come from the conditions that test them."
)


def _notes(summary: Mapping[str, Any]) -> list[str]:
    """The loud lines first (skipped cases, a baseline with other conditions), then the
    run's notes, then the figures hidden for being not applicable everywhere."""
    notes = summary.get("notes")
    out = [line for line in (skipped_line(summary), comparison_line(summary)) if line]
    out += [str(n) for n in notes] if isinstance(notes, list) else []
    hidden = hidden_figures(summary)
    if hidden:
        out.append(f"Not applicable on every row (left out of the tables): {', '.join(hidden)}")
    return out


def markdown(summary: Mapping[str, Any]) -> str:
    parts = ["# Sliced report", "", headline(summary)]
    parts += ["", *(f"- {n}" for n in _notes(summary))] if _notes(summary) else []
    parts += ["", f"**Gates: {verdict(summary)}**"]
    parts += ["", LEGEND]
    for title, header, rows in _sections(summary):
        parts += ["", f"## {title}", "", md_table(header, rows) if rows else "None."]
    return "\n".join(parts) + "\n"


# Filters slice rows by text (typed, or from a ``#filter=TEXT`` link, so a filtered view can be
# shared); sets data-ready so a headless check can see the script ran to the end.
_JS = """
(function () {
  var input = document.getElementById('slice-filter');
  function apply() {
    var needle = input.value.toLowerCase();
    document.querySelectorAll('table.sliced tbody tr').forEach(function (tr) {
      var first = tr.cells[0].textContent.toLowerCase();
      tr.style.display = first.indexOf(needle) === -1 ? 'none' : '';
    });
  }
  input.addEventListener('input', apply);
  var hash = window.location.hash;
  if (hash.indexOf('#filter=') === 0) {
    input.value = decodeURIComponent(hash.slice(8));
    apply();
  }
  document.body.setAttribute('data-ready', String(document.querySelectorAll('table').length));
})();
"""


def html_page(summary: Mapping[str, Any]) -> str:
    status = verdict(summary)
    css_class = {"passed": "passed", "FAILED": "failed"}.get(status, "none")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>Sliced report</title>",
        # Wide tables scroll on their own, the page keeps its width.
        f"<style>{CSS} body {{ max-width: none; }} .wide {{ overflow-x: auto; }} "
        "table.sliced td { white-space: nowrap; }</style></head><body>",
        "<h1>Sliced report</h1>",
        f"<p>{html.escape(headline(summary))}</p>",
        *(
            ["<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in _notes(summary)) + "</ul>"]
            if _notes(summary)
            else []
        ),
        f'<p class="{css_class}"><strong>Gates: {html.escape(status)}</strong></p>',
        f"<p>{html.escape(LEGEND)}</p>",
        '<p><label>Filter slices: <input id="slice-filter" type="search" '
        'placeholder="e.g. multi-hop"></label></p>',
    ]
    for title, header, rows in _sections(summary):
        table = html_table(header, rows)
        if header[0] == "slice":  # the tables the slice filter applies to
            table = table.replace("<table>", '<table class="sliced">', 1)
        body = f'<div class="wide">{table}</div>' if rows else "<p>None.</p>"
        parts += [f"<h2>{html.escape(title)}</h2>", body]
    parts += [f"<script>{_JS}</script>", "</body></html>"]
    return "\n".join(parts) + "\n"


def _rich_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> Table:
    table = Table(title=title)
    for i, col in enumerate(header):
        # Figure names fold rather than being cut: a cut name could be the wrong metric.
        justify: Any = "left" if i == 0 or col in ("question", SKIPPED_HEADER[-1]) else "right"
        table.add_column(col, justify=justify, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def print_sliced(summary: dict[str, Any], console: Console) -> None:
    """The report's tables on the console (rich markup in cells is not interpreted)."""
    from rich.markup import escape

    console.print(escape(headline(summary)))
    loud = {skipped_line(summary), comparison_line(summary)}
    for note in _notes(summary):
        style = "yellow" if note in loud else "default"
        console.print(f"  [{style}]{escape(note)}[/{style}]", highlight=False, soft_wrap=True)
    sections = _console_sections(summary)
    for title, header, rows in sections:
        if rows:
            safe = [[escape(c) for c in row] for row in rows]
            console.print(_rich_table(title, [escape(h) for h in header], safe))
    shown = {row[0] for _, header, rows in sections if header[0] == "slice" for row in rows}
    if len(shown) < len(summary["slices"]):
        console.print(
            f"{len(summary['slices']) - len(shown)} more slices (crossed with condition), every "
            "method and the worst rows of each slice: in the report files."
        )
    console.print(f"gates: {verdict(summary)}")
