"""What users see of ragpulse's shape stays as it was: ``ragpulse metrics``, every
``--help`` and every settings key, against the snapshots in tests/snapshots/.

The snapshots were taken before the layout moved (issue 34). A change to any of them is
made on purpose: run ``.venv/bin/python tests/support/snapshots.py`` and commit the diff
with the change that explains it. ``settings_keys.txt`` is never rewritten: every key a
settings file could hold then still reads, at its place now or through a deprecated alias.
"""

from __future__ import annotations

import difflib

import pytest
from support.snapshots import BEFORE_THE_MOVE, SNAPSHOT_FILES, SNAPSHOTS, parse_keys, settings_keys

from ragpulse.config import Settings
from ragpulse.settings_env import check_environment, env_name, is_old_variable
from ragpulse.settings_moved import dotted, new_key


@pytest.mark.parametrize("file", sorted(SNAPSHOT_FILES))
def test_what_users_see_matches_its_snapshot(file: str) -> None:
    expected = (SNAPSHOTS / file).read_text()
    now = SNAPSHOT_FILES[file]()
    diff = "".join(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            now.splitlines(keepends=True),
            f"tests/snapshots/{file}",
            "now",
        )
    )
    assert not diff, f"changed (regenerate with tests/support/snapshots.py if on purpose):\n{diff}"


def test_every_key_of_before_the_move_still_reads() -> None:
    """Each key of the snapshot taken before the sinks owned their settings is a key now,
    with its default and variable, or a deprecated alias of a key now with the same
    default, whose old variable is still accepted (with a deprecation message)."""
    now = parse_keys(settings_keys())
    before = parse_keys((SNAPSHOTS / BEFORE_THE_MOVE).read_text())
    assert len(before) > 250  # the snapshot is read
    problems, aliased = [], 0
    for key, (default, variable) in before.items():
        if key in now:
            if now[key] != (default, variable):
                problems.append(f"{key}: was {(default, variable)}, now {now[key]}")
            continue
        moved = new_key(tuple(key.split(".")))
        if moved is None or dotted(moved) not in now:
            problems.append(f"{key}: neither a key now nor a deprecated alias of one")
            continue
        aliased += 1
        if now[dotted(moved)][0] != default:
            problems.append(
                f"{key} -> {dotted(moved)}: default {now[dotted(moved)][0]}, was {default}"
            )
        if variable and not (env_name(dotted(moved)) == variable or is_old_variable(variable)):
            problems.append(f"{variable}: neither the new key's variable nor an old one")
        if variable:
            check_environment(Settings, {variable: "1"})  # accepted, not an unknown variable
    assert not problems, "\n".join(problems)
    assert aliased >= 25  # prometheus.*, otel_export.*, regression.*, evaluation.model_* ...
