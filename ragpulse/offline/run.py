"""The progress bar and plug-in context of an offline run (``eval``, ``eval --replay``,
the harness)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)

from ragpulse.config import Settings
from ragpulse.plugin_context import PluginContext


def offline_run(
    settings: Settings, description: str, total: int | None, console: Console
) -> tuple[Progress, TaskID, PluginContext]:
    """A progress bar on ``console`` and the run's plug-in context.

    Offline, a judge waits for its per-minute budget instead of skipping rows, and says
    so on the progress bar.
    """
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeRemainingColumn())  # fmt: skip
    progress = Progress(*columns, console=console)
    task = progress.add_task(description, total=total)
    context = PluginContext(
        settings,
        offline=True,
        notify=lambda msg: progress.update(task, description=f"scoring ({msg})"),
    )
    return progress, task, context
