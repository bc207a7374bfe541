"""The reference pages that come from the code, written at build time (mkdocs-gen-files).

Each page is read off the object that defines it, so the site cannot drift from what
ragpulse does:

* ``reference/settings.md``: the pydantic settings model ``ragpulse.config.Settings``,
  every field with its type, default, environment variable and description;
* ``reference/cli.md``: the argparse parser ``ragpulse.cli.build_parser()``;
* ``reference/metrics.md``: every registered evaluator (``ragpulse.plugins``), its tier,
  direction, whether it is on by default, and its options;
* ``reference/prometheus.md``: every series the collector declares (its own, the
  default sinks', Kafka intake's and the re-key stage's), with help text and labels;
* ``reference/api.md``: the public Python API, from docstrings (mkdocstrings);
* ``reference/public-api.md``: the public surface in one list (:mod:`ragpulse.public_api`):
  each public module's ``__all__``, the plug-in kinds, the commands, the settings.

Only public, stable modules are imported here.
"""

from __future__ import annotations

import argparse
import enum
import importlib
import inspect
import re
from collections.abc import Iterator
from typing import Any, get_args, get_origin

import mkdocs_gen_files
from prometheus_client import CollectorRegistry
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from ragpulse import plugin_index, plugins, public_api
from ragpulse.cli import build_parser
from ragpulse.config import Settings
from ragpulse.options import bounds, default_of, type_name
from ragpulse.plugin_context import PluginContext
from ragpulse.settings_env import env_name, submodel
from ragpulse.source import Source
from ragpulse.telemetry import CollectorMetrics

GENERATED = (
    "<!-- Generated from the code at build time by docs/_gen/reference.py: edit the code, "
    "not this page. -->\n\n"
)


# -- text helpers -----------------------------------------------------------------------


def cell(text: object) -> str:
    """One Markdown table cell: no newlines, no bare pipes."""
    return " ".join(str(text).split()).replace("|", "\\|")


def prose(doc: str | None) -> str:
    """A docstring's reStructuredText bits as Markdown: ``x`` and :role:`x` -> `x`."""
    if not doc:
        return ""
    text = inspect.cleandoc(doc)
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def first_paragraph(doc: str | None) -> str:
    return prose(doc).split("\n\n")[0].replace("\n", " ")


def markdown_type(annotation: Any) -> str:
    """A field's type in a Markdown table (its literals in backquotes, ``|`` escaped)."""
    return type_name(annotation, literal=lambda a: f"`{a}`", bar=" \\| ")


def default_text(info: FieldInfo) -> str:
    value = default_of(info)
    if value is PydanticUndefined:
        return "required"
    if value is None:
        return "-"
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, list) and value and isinstance(value[0], BaseModel):
        value = [v.model_dump(mode="json", exclude_none=True) for v in value]
    if isinstance(value, dict) and any(isinstance(v, BaseModel) for v in value.values()):
        value = {k: v.model_dump(mode="json", exclude_none=True) for k, v in value.items()}
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value == "" or value == [] or value == {}:
        return f"`{value!r}`" if value == "" else f"`{value}`"
    return f"`{value}`"


# -- settings ---------------------------------------------------------------------------


def item_model(annotation: Any) -> type[BaseModel] | None:
    """The model inside ``list[M]`` or ``dict[str, M]`` (priority rules, regression sets)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is list and args:
        return submodel(args[0])
    if origin is dict and len(args) == 2:
        return submodel(args[1])
    return None


def registered(info: FieldInfo) -> str | None:
    """The names a field takes from a plug-in registry (``source``: ``ragpulse.sources``)."""
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    if extra.get("registry") != plugin_index.SOURCE_GROUP:
        return None
    return " \\| ".join(f"`{name}`" for name in plugins.source_names())


def settings_table(model: type[BaseModel], prefix: str, env: bool) -> list[str]:
    """One row per plain field: key (type, default), environment variable, description."""
    columns = ["key", "type and default", *(["environment"] if env else []), "description"]
    rows = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for name, info in model.model_fields.items():
        if submodel(info.annotation) is not None:
            continue  # its own section below
        kind = registered(info) or markdown_type(info.annotation) + bounds(info)
        cells = [f"`{name}`", f"{kind}; default {default_text(info)}"]
        if env:
            cells.append(f"`{env_name(prefix + name)}`")
        cells.append(cell(prose(info.description)))
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def settings_sections(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    title = prefix.rstrip(".") or "top level"
    doc = first_paragraph(model.__doc__) if model.__doc__ else ""
    yield f"## `{title}`\n" if prefix else "## Top level\n"
    if doc and model is not Settings:
        yield doc + "\n"
    yield "\n".join(settings_table(model, prefix, env=True)) + "\n"
    for name, info in model.model_fields.items():
        item = item_model(info.annotation)
        if item is not None:
            kind = "Each entry" if get_origin(info.annotation) is list else "Each value"
            yield f"### Entries of `{prefix}{name}`\n"
            yield f"{kind} of `{prefix}{name}` is a {item.__name__}: "
            yield first_paragraph(item.__doc__) + "\n"
            yield "\n".join(settings_table(item, "", env=False)) + "\n"
    for name, info in model.model_fields.items():
        sub = submodel(info.annotation)
        if sub is not None:
            yield from settings_sections(sub, f"{prefix}{name}.")


def settings_page() -> str:
    intro = (
        "# Settings\n\n" + GENERATED + "Every setting of `ragpulse serve`, `eval`, `rekey` and "
        "`demo`. Values come from, in rising order: the defaults below, the settings file "
        "(YAML, or TOML by extension; `--config FILE` or `RAGPULSE_CONFIG`), the environment, "
        "and flags. A nested key is written with dots in these tables and nested in the "
        "file (`assembly.grace_s` is `assembly: {grace_s: 0.5}`); its variable joins the "
        "levels with `__` (`RAGPULSE_ASSEMBLY__GRACE_S`). The variables listed are the ones "
        "to use: where a flag sets a nested key, the variable is named after the flag "
        "(`RAGPULSE_JUDGE_BASE_URL`) and the nested name works as well. Unknown keys and "
        "unknown `RAGPULSE_*` variables are errors. `ragpulse config check FILE` checks a "
        "file; `ragpulse config show` prints every effective value and where it came "
        "from.\n\n"
        "The app side (`ragpulse.configure`) has settings of its own: see "
        "[Instrument an app](../how-to/instrument.md#app-side-settings). Plug-in options "
        "(`evaluation.options.<metric/method>`, `sinks.<name>`) are listed with each "
        "plug-in in the [metric catalogue](metrics.md#sinks).\n\n"
    )
    return intro + "\n".join(settings_sections(Settings)) + "\n"


# -- CLI --------------------------------------------------------------------------------


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse offers no public way to walk subcommands
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def expanded_help(action: argparse.Action, prog: str) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    params = {**vars(action), "prog": prog}
    if params.get("choices") is not None:
        params["choices"] = ", ".join(map(str, params["choices"]))
    return action.help % params


def options_table(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| argument | meaning |", "|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue  # subcommands get sections of their own; every one takes --help
        if action.option_strings:
            name = ", ".join(action.option_strings)
            if action.nargs != 0:
                name += f" {action.metavar or action.dest.upper()}"
        else:
            name = action.metavar or action.dest
        text = expanded_help(action, parser.prog)
        if action.choices is not None and action.metavar is None:
            text += f" (one of: {', '.join(map(str, action.choices))})"
        if isinstance(action, argparse._AppendAction):
            text += " (may be repeated)"
        rows.append(f"| `{cell(name)}` | {cell(text)} |")
    return rows


def cli_sections(parser: argparse.ArgumentParser, depth: int = 2) -> Iterator[str]:
    for child in subparsers(parser).values():
        yield f"{'#' * depth} `{child.prog}`\n"
        if child.description:
            yield cell(child.description) + "\n"
        usage = child.format_usage().removeprefix("usage: ").strip()
        yield f"```text\n{usage}\n```\n"
        if len(options_table(child)) > 2:
            yield "\n".join(options_table(child)) + "\n"
        yield from cli_sections(child, min(depth + 1, 4))


def cli_page() -> str:
    parser = build_parser()
    return (
        "# Command line\n\n" + GENERATED + "Every subcommand takes `--help`; `--log-level LEVEL` "
        "goes before or after the subcommand's name. Flags win over the environment and the "
        "settings file ([Settings](settings.md)). `ragpulse --version` prints the version.\n\n"
        "```text\n"
        + parser.format_usage().removeprefix("usage: ").strip()
        + "\n```\n\n"
        + "\n".join(cli_sections(parser))
    )


# -- metric catalogue -------------------------------------------------------------------


def options_rows(options: type[BaseModel]) -> list[str]:
    rows = ["| option | type and default | description |", "|---|---|---|"]
    for name, info in options.model_fields.items():
        kind = markdown_type(info.annotation) + bounds(info)
        rows.append(
            f"| `{name}` | {kind}; default {default_text(info)} | {cell(prose(info.description))} |"
        )
    return rows


def metrics_page() -> str:
    classes = plugins.evaluator_classes()
    lines = [
        "# Metric catalogue\n",
        GENERATED,
        "Every evaluator registered with this installation, by `metric/method` (the name "
        "`evaluation.evaluators`, `--evaluators` and `--metrics` take; a bare metric name "
        "means its methods that are on by default). Scores are in [0, 1]; *direction* says "
        "which way is good (`lower_is_better` for risks such as injection). *Default*: on "
        "when no evaluators are named (judge methods need a configured judge; "
        "reference-based methods run in `ragpulse eval` on rows that carry references). "
        "Options go under `evaluation.options.<metric/method>`.\n",
        "| name | tier | direction | default | needs references |",
        "|---|---|---|---|---|",
    ]
    for name, cls in classes.items():
        anchor = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        lines.append(
            f"| [`{name}`](#{anchor}) | {cls.tier.value} | {cls.direction.value} | "
            f"{'on' if cls.default_enabled else 'opt-in'} | "
            f"{'yes' if cls.requires_reference else '-'} |"
        )
    lines.append("")
    for name, cls in classes.items():
        anchor = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        lines.append(f"## `{name}` {{#{anchor}}}\n")
        lines.append(
            f"Tier **{cls.tier.value}**, {cls.direction.value.replace('_', ' ')}, "
            f"{'on by default' if cls.default_enabled else 'opt-in'}.\n"
        )
        doc = prose(cls.__doc__)
        if doc:
            lines.append(doc + "\n")
        if cls.Options.model_fields:
            lines.append("\n".join(options_rows(cls.Options)) + "\n")
    lines.append("## Sinks\n")
    lines.append(
        "Sinks are configured under `sinks.<name>`; naming one enables it, "
        "`{enabled: false}` turns one off. Each option is also a variable, "
        "`RAGPULSE_SINKS__<NAME>__<OPTION>` (a list or a mapping as JSON), and "
        "`ragpulse serve --results-jsonl` and `--otlp-export-endpoint` set "
        "`sinks.jsonl.path` and `sinks.otel.endpoint`. The built-in sinks take the "
        "top-level `redaction` section unless given a `redaction` of their own.\n"
    )
    for name, sink in plugins.sink_classes().items():
        lines.append(f"### `{name}`\n")
        state = "on by default" if sink.default_enabled else "on when configured"
        lines.append(f"{state}. " + first_paragraph(sink.__doc__ or sink.Options.__doc__) + "\n")
        if sink.Options.model_fields:
            lines.append("\n".join(options_rows(sink.Options)) + "\n")
    lines.append("## Sources\n")
    lines.append(
        "Where spans come from: `source` (`ragpulse serve --source`) names one. ragpulse's "
        "own read their settings where they always were (the receivers' top-level keys, "
        "[`kafka`](settings.md), [`stored_traces`](settings.md)); a third-party source "
        "reads `sources.<name>`, validated by its options below.\n"
    )
    for name, source in plugins.source_classes().items():
        lines.append(f"### `{name}`\n")
        doc = first_paragraph(source.__doc__ or "")
        url = f" URL: `{source.url_shape}`." if source.url_shape else ""
        lines.append(f"{doc}{url}\n")
        # A source that reads its settings elsewhere (the built-in ones) has them there.
        reads_own = source.options_from.__func__ is Source.options_from.__func__  # type: ignore[attr-defined]
        if reads_own and source.Options.model_fields:
            lines.append("\n".join(options_rows(source.Options)) + "\n")
    return "\n".join(lines)


# -- Prometheus series --------------------------------------------------------------------


def declared_series() -> list[tuple[str, str, str, tuple[str, ...], str]]:
    """(exposed name, type, help, labels, where) for every series ragpulse declares."""
    from ragpulse.collector.conversations.turn_writer import TurnTopicMetrics
    from ragpulse.collector.intake.kafka import KafkaMetrics
    from ragpulse.collector.intake.rekey import Rekeyer
    from ragpulse.collector.stored.common import SourceMetrics
    from ragpulse.config import KafkaSettings

    found: list[tuple[str, str, str, tuple[str, ...], str]] = []

    def read(registry: CollectorRegistry, where: str) -> None:
        seen = {s[0] for s in found}
        for collector in list(registry._collector_to_names):  # the metric objects
            # A custom collector (the prometheus sink's) lists its families itself.
            families = getattr(collector, "declared", None) or [
                (collector._name, collector._type, collector._documentation,  # type: ignore[attr-defined]
                 tuple(collector._labelnames))  # type: ignore[attr-defined]
            ]  # fmt: skip
            for name, kind, documentation, labels in families:
                exposed = f"{name}_total" if kind == "counter" else name
                if exposed not in seen:
                    found.append((exposed, kind, documentation, tuple(labels), where))

    context = PluginContext(Settings())
    read(context.metrics.registry, "collector")
    for name, sink in plugins.sink_classes().items():
        if sink.default_enabled:
            built = sink.from_settings(context.settings, context)
            if built is not None:
                built.shutdown()
            read(context.metrics.registry, f"`{name}` sink")
    kafka = CollectorRegistry()
    KafkaMetrics(kafka)
    TurnTopicMetrics(kafka)
    read(kafka, "`serve --source kafka`")
    stored = CollectorRegistry()
    SourceMetrics(stored)
    read(stored, "stored traces")
    rekey = CollectorRegistry()
    Rekeyer(KafkaSettings(), registry=rekey)
    read(rekey, "`ragpulse rekey`")
    assert isinstance(CollectorMetrics(), CollectorMetrics)
    return found


def prometheus_page() -> str:
    lines = [
        "# Prometheus series\n",
        GENERATED,
        "Every series `ragpulse serve` (and `rekey`) exposes on `/metrics` (port 9464 by "
        "default), read from their declarations. Counters carry the `_total` suffix; each "
        "histogram also gives `_bucket`, `_sum` and `_count`. `service` and `route` values are "
        "bounded (`sinks.prometheus.max_services`, `max_routes`, `max_route_pairs`; the rest fold "
        "into `other`), and every other label takes a fixed set of values. "
        "`ragpulse_eval_score` carries the trace and span id of a scored record as an "
        "exemplar, in the OpenMetrics exposition that Prometheus negotiates (keep them with "
        "`--enable-feature=exemplar-storage`).\n",
    ]
    sections = {
        "collector": "## The collector\n\nIntake, assembly, evaluation and sink health.",
        "`prometheus` sink": "## Scores and agent turns\n\nDeclared by the `prometheus` sink: "
        "the scores, and for agent turns the turns, steps, tool calls and tools whose results "
        "carried an injection. The `tool` label is the tool's name when the `agents.tools` "
        "setting lists it, else `other`, so that every replica labels alike.",
        "`serve --source kafka`": "## Kafka intake\n\nWith `source: kafka`: the span group, "
        "and the conversation group (`ragpulse_kafka_turn*`, see [Scale out with "
        "Kafka](../how-to/kafka.md)).",
        "stored traces": "## Stored traces\n\nWith `source: phoenix`, `mlflow` or "
        "`langfuse`, and in `ragpulse eval --from`.",
        "`ragpulse rekey`": "## The re-key stage\n\nExposed by `ragpulse rekey`.",
    }
    series = declared_series()
    for where, heading in sections.items():
        lines += [heading + "\n", "| series | labels | meaning |", "|---|---|---|"]
        for name, kind, doc, labels, origin in series:
            if origin == where:
                shown = ", ".join(f"`{label}`" for label in labels) or "-"
                lines.append(f"| `{name}` ({kind}) | {shown} | {cell(doc)} |")
        lines.append("")
    missing = {origin for *_, origin in series} - set(sections)
    assert not missing, f"series from {missing} have no section on the page"
    return "\n".join(lines) + "\n"


# -- API --------------------------------------------------------------------------------

MODULE_DOCS = {
    "ragpulse": "Instrumentation (app side), feedback, plain-function evaluators and the record "
    "shapes, all importable from the package itself.",
    "ragpulse.record": "The shapes every part of ragpulse speaks: spans, records, results.",
    "ragpulse.plugin_context": "What every plug-in gets: settings, metrics, shared objects; "
    "the base of its options.",
    "ragpulse.errors": "The errors an app or a plug-in meets (a plug-in's `load` raises "
    "`ModelUnavailable` when it cannot run here).",
}
"""One line per public module; a plug-in contract's module is said by its group."""


def module_doc(module: str) -> str:
    contracts = {
        cls.__module__: group for group, classes in plugins.CONTRACTS.items() for cls in classes
    }
    if module in contracts:
        return f"The contracts of the `{contracts[module]}` entry-point group."
    return MODULE_DOCS[module]


def api_page() -> str:
    lines = [
        "# Python API\n",
        GENERATED,
        "The names an app or a plug-in imports ([Public surface](public-api.md) lists them); "
        "everything else inside the package may move between releases.\n",
    ]
    for module, names in public_api.names().items():
        lines.append(f"## `{module}`\n\n{module_doc(module)}\n")
        if module == "ragpulse":  # lazy names: each rendered from where it is defined
            for name in names:
                lines.append(f"::: ragpulse.{name}\n    options:\n      heading_level: 3\n")
            continue
        members = "".join(f"\n        - {name}" for name in names)
        lines.append(
            f"::: {module}\n    options:\n      heading_level: 3\n      show_root_heading: "
            f"false\n      members:{members}\n"
        )
    return "\n".join(lines)


def surface_page() -> str:
    """What is public, in one list: the Python names, the plug-in kinds, the commands and
    the settings."""
    lines = [
        "# Public surface\n",
        GENERATED,
        "What an app, a plug-in or an operator relies on: the Python names below (each "
        "module's `__all__`), the plug-in kinds, the commands and their flags, and the "
        "settings keys. Everything else inside the package may move between releases "
        "without notice.\n",
        "## Python names\n",
        "Documented on the [Python API](api.md) page.\n",
    ]
    for module, names in public_api.names().items():
        lines += [f"### `{module}`\n", module_doc(module) + "\n", "| name | what |", "|---|---|"]
        for name in sorted(names):
            obj = getattr(importlib.import_module(module), name)
            if isinstance(obj, type) or inspect.isfunction(obj):
                what = cell(first_paragraph(obj.__doc__))
            else:  # a constant or a type alias: its value
                shown = sorted(obj) if isinstance(obj, frozenset) else obj
                shown = str(shown).replace("typing.", "").replace(" | ", " or ")
                what = f"`{cell(shown)}`"
            lines.append(f"| `{name}` | {what} |")
        lines.append("")
    lines += [
        "## Plug-in kinds\n",
        "A plug-in is one class in one file of its own package plus one entry point in the "
        "group of its kind ([Your own metrics and sinks](../how-to/plugins.md)).\n",
        "| entry-point group | the class implements |",
        "|---|---|",
    ]
    for group, contracts in plugins.CONTRACTS.items():
        named = " or ".join(f"`{c.__module__}.{c.__name__}`" for c in contracts)
        lines.append(f"| `{group}` | {named} |")
    parser = build_parser()
    commands = ", ".join(f"`ragpulse {name}`" for name in subparsers(parser))
    lines += [
        "",
        "## Commands\n",
        f"{commands}: each with the flags on the [Command line](cli.md) page.\n",
        "## Settings\n",
        "Every key on the [Settings](settings.md) page, with its environment variable; each "
        "plug-in's options with the plug-in in the [metric catalogue](metrics.md).\n",
    ]
    return "\n".join(lines)


PAGES = {
    "reference/settings.md": settings_page,
    "reference/cli.md": cli_page,
    "reference/metrics.md": metrics_page,
    "reference/prometheus.md": prometheus_page,
    "reference/api.md": api_page,
    "reference/public-api.md": surface_page,
}

for path, build in PAGES.items():
    with mkdocs_gen_files.open(path, "w") as page:
        page.write(build())
    mkdocs_gen_files.set_edit_path(path, "docs/_gen/reference.py")
