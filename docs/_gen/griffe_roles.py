"""A griffe extension for the API pages: reStructuredText roles in docstrings as code.

ragpulse's docstrings cross-reference with Sphinx roles (:class:`PluginContext`,
:meth:`~Evaluator.load`); Markdown shows those literally. This turns each into a code
span of the name (the last dotted part where the role says ``~``).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?[a-z]+:`(?P<tilde>~?)(?P<target>[^`]+)`")


def _plain(match: re.Match[str]) -> str:
    target = match["target"]
    return f"`{target.rsplit('.', 1)[-1] if match['tilde'] else target}`"


class SphinxRolesAsCode(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_plain, obj.docstring.value)
