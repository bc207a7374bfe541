"""What users see of ragpulse's shape stays as it was: ``ragpulse metrics``, every
``--help`` and every settings key, against the snapshots in tests/snapshots/.

A change to any of them is made on purpose: run ``.venv/bin/python
tests/support/snapshots.py`` and commit the diff with the change that explains it.
"""

from __future__ import annotations

import difflib

import pytest
from support.snapshots import SNAPSHOT_FILES, SNAPSHOTS


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
