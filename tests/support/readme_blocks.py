"""The fenced blocks of README.md and docs/**/*.md and their ``readme-test`` markers, for
tests/docs/test_readme.py.

The rule the README test applies to every page (documented here once, where it is parsed):

* A fenced block tagged ``sh``, ``bash``, ``shell`` or ``console`` is commands. It runs
  as written: as one bash script (``-e -o pipefail``: every line must succeed) in the
  root of a fresh clone, in page order (README.md first, then the docs pages in the
  order of mkdocs.yml's navigation), so a later block may use what an earlier one
  made, and it must exit 0. In a ``console`` block only ``$ ``-prefixed lines are
  commands (the rest is their output).
* A block with a title (```` ```python title="app.py" ````, as MkDocs Material shows
  it) is a file the reader saves under that name: before a shell block runs, every
  titled block above it on the same page is written to that path in the clone.
* An HTML comment right before the opening fence (blank lines between are fine)
  changes that:

  - ``<!-- readme-test: skip (why) -->``: not run; the reason is reported (a pytest skip).
  - ``<!-- readme-test: needs WHAT -->``: needs something absent from a test machine
    (docker, a Kafka broker, an API key): skipped, saying what. Needs the test meets
    itself: ``needs judge at 127.0.0.1:8000`` starts the tests' OpenAI-compatible
    judge double on that port (skipped, saying so, when it is taken); ``needs phoenix at
    127.0.0.1:6006`` and ``needs mlflow at 127.0.0.1:5000`` run with the session's real
    Phoenix or MLflow (the live tests' own, started on that usual port when it was free;
    skipped, saying so, when it runs elsewhere); and ``needs free
    ports P1,P2,...`` (a block that starts ``ragpulse serve`` on its default ports) runs
    the block in a network namespace of its own, where every port is free; where no
    namespace can be had, it runs when those ports can be bound on 127.0.0.1, and is
    skipped otherwise, with the rest of its page.
  - ``<!-- readme-test: synopsis (why) -->``: a usage synopsis (``[optional]`` arguments),
    not run; each line's subcommand must exist and every flag it names must be in that
    subcommand's ``--help``.

  Any other ``readme-test`` comment, or one not followed by a fence, is an error, so a
  typo cannot silently skip a block.
* Every other block is not commands: untagged blocks are diagrams (the test fails if
  one starts like a command, so no command hides from it), ``yaml`` and ``toml``
  and ``json`` blocks must parse (a ``.jsonl`` title: each line), ``python`` blocks
  must compile. Inline ``code`` spans are prose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SHELL_TAGS = frozenset({"sh", "bash", "shell", "console"})
MARKER = re.compile(r"^<!--\s*readme-test:\s*(?P<body>.*?)\s*-->\s*$")
_KINDS = re.compile(r"^(?P<kind>skip|needs|synopsis)\b\s*(?P<why>.*)$")
_FENCE = re.compile(r"^ {0,3}(?P<fence>```+|~~~+)\s*(?P<tag>[\w+-]*)(?P<rest>.*)$")
_TITLE = re.compile(r"""\btitle=(?P<q>["'])(?P<title>[^"']+)(?P=q)""")
COMMAND_WORDS = ("$ ", "ragpulse ", "make ", "pip ", "python", "docker ", "kubectl ",
                 "git ", "curl ", "cd ", "export ")  # fmt: skip
"""How a command line starts: an untagged block starting so is a command in hiding."""


class ReadmeError(ValueError):
    """A page breaks the rule above (a bad marker, an unclosed fence)."""


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    tag: str  # lower-cased info string's first word; "" when untagged
    body: str
    marker: str | None = None  # "skip" | "needs" | "synopsis"
    why: str = ""  # the marker's text after its kind
    title: str | None = None  # the file a titled block is saved as
    source: str = "README.md"  # the page it is on

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"

    @property
    def id(self) -> str:
        return f"{self.source}:L{self.line}-{self.tag or 'untagged'}"

    @property
    def is_shell(self) -> bool:
        return self.tag in SHELL_TAGS

    def script(self) -> str:
        """What bash runs: the body, or a console block's ``$ `` lines without the prompt."""
        if self.tag != "console":
            return self.body
        lines = self.body.splitlines()
        return "\n".join(line[2:] for line in lines if line.startswith("$ "))


def parse(text: str, source: str = "README.md") -> list[Block]:
    """Every fenced block of a Markdown page, with the marker on the line before it."""
    blocks: list[Block] = []
    lines = text.splitlines()
    pending: tuple[int, str, str] | None = None  # (line, kind, why) of an unused marker
    i = 0
    while i < len(lines):
        line = lines[i]
        if m := MARKER.match(line.strip()):
            if pending is not None:
                raise ReadmeError(f"{source}:{pending[0]}: readme-test marker without a block")
            kind = _KINDS.match(m["body"])
            if kind is None:
                raise ReadmeError(
                    f"{source}:{i + 1}: unknown readme-test marker {m['body']!r} "
                    "(use skip (why), needs WHAT or synopsis (why))"
                )
            pending = (i + 1, kind["kind"], kind["why"].strip())
            i += 1
            continue
        fence = _FENCE.match(line)
        if fence is None:
            if line.strip() and pending is not None:
                raise ReadmeError(f"{source}:{pending[0]}: readme-test marker without a block")
            i += 1
            continue
        close = fence["fence"]
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == close), None)
        if end is None:
            raise ReadmeError(f"{source}:{i + 1}: fence never closed")
        marker, why = (pending[1], pending[2]) if pending else (None, "")
        body = "\n".join(lines[i + 1 : end]) + "\n"
        title = _TITLE.search(fence["rest"])
        named = title["title"] if title else None
        blocks.append(Block(i + 1, fence["tag"].lower(), body, marker, why, named, source))
        pending = None
        i = end + 1
    if pending is not None:
        raise ReadmeError(f"{source}:{pending[0]}: readme-test marker without a block")
    return blocks


def synopsis_commands(body: str) -> list[str]:
    """A synopsis block's commands: a line that starts with whitespace continues the last."""
    commands: list[str] = []
    for line in body.splitlines():
        if not line.strip():
            continue
        if line[0].isspace() and commands:
            commands[-1] += " " + line.strip()
        else:
            commands.append(line.strip())
    return commands


_SUBCOMMAND_WORD = re.compile(r"^[a-z][a-z-]*$")
_FLAG = re.compile(r"(?<![\w-])(--?[a-z][a-z0-9-]*)")


def split_synopsis(command: str) -> tuple[list[str], list[str]]:
    """``ragpulse regression list [--dir DIR]`` -> (["regression", "list"], ["--dir"])."""
    words = command.split()
    sub: list[str] = []
    for word in words[1:]:
        if not _SUBCOMMAND_WORD.match(word):
            break
        sub.append(word)
    rest = " ".join(words[1 + len(sub) :])
    return sub, sorted(set(_FLAG.findall(rest)))


def nav_pages(nav: object) -> list[str]:
    """The Markdown pages of an mkdocs.yml ``nav``, in order (paths relative to docs/)."""
    if isinstance(nav, str):
        return [nav] if nav.endswith(".md") else []
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    if isinstance(nav, list):
        return [page for item in nav for page in nav_pages(item)]
    return []
