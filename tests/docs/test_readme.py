"""README.md and the documentation to the letter: every shell command in them runs as
written in a fresh clone.

Which blocks run, the titled blocks that are files to save, and the
``<!-- readme-test: ... -->`` markers that skip a block or say what it needs, are
defined in tests/support/readme_blocks.py (top of that file). The pages are README.md, then
docs/**/*.md in the order of mkdocs.yml's navigation (then any page it leaves out).

The fresh clone is ``git clone`` of the checkout's committed HEAD into a temporary
folder, cloned once for the whole module, and the pages tested are HEAD's: uncommitted
work is not in them, as it is not in what a newcomer gets. Nothing is reinstalled: the
pages' ``ragpulse`` is the one beside the interpreter running these tests (its venv's
bin folder goes first on PATH), and ``make`` in the clone finds that same venv
already installed:

* the clone's ``.venv`` is a real folder whose ``bin`` is a symlink to that bin folder,
  so ``$(BIN)/python`` and ``$(BIN)/ragpulse`` exist;
* its ``.venv/.installed`` stamp is created there (never the shared venv's own stamp)
  and the clone's ``pyproject.toml`` is dated an hour back, so the stamp is newer and
  make never runs its install recipe: an editable ``pip install -e .`` from the clone
  would repoint the shared venv at a temporary folder. ``make -n install`` must plan
  nothing before any block runs; if it would, the test stops there.

Commands run with the environment of a newcomer: no ``RAGPULSE_*``, ``OPENAI_*``,
``PYTHONPATH`` or parent ``make`` variables. Blocks run in page order and share the
clone (``rows.jsonl`` made by one block is scored by the next), so run the whole
module, not one block. The demo commands pick free ports themselves when 4318/9464
are taken; the judge blocks' port 8000 and a ``needs free ports`` block's ports are
taken for the block or the block is skipped, saying so.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from support.judge_server import JudgeServer
from support.readme_blocks import (
    COMMAND_WORDS,
    Block,
    nav_pages,
    parse,
    split_synopsis,
    synopsis_commands,
)

import ragpulse
from ragpulse.sdk.config import _EXPORTER_NAMES

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # not resolved: the venv's bin, not the base Python's
BLOCK_TIMEOUT_S = 600  # a hang guard only; nothing asserts on how long a block took
JUDGE_NEED = "judge at 127.0.0.1:8000"
TOOL_NEEDS = {
    "phoenix at 127.0.0.1:6006": "phoenix_server",
    "mlflow at 127.0.0.1:5000": "mlflow_server",
}
"""Needs the test meets with the session's real tracing tool, when it runs on that port."""


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout


def _committed_pages() -> dict[str, str] | None:
    """README.md and docs/**/*.md as HEAD has them, in reading order; None without git."""
    try:
        readme = _git("show", "HEAD:README.md")
        docs = [p for p in _git("ls-tree", "-r", "--name-only", "HEAD", "docs").split() if p]
        config = yaml.safe_load(_git("show", "HEAD:mkdocs.yml")) if docs else {}
    except (OSError, subprocess.SubprocessError):
        return None
    markdown = [p for p in docs if p.endswith(".md")]
    ordered = [f"docs/{page}" for page in nav_pages(config.get("nav", []))]
    ordered = [p for p in ordered if p in markdown]
    ordered += sorted(p for p in markdown if p not in ordered)
    pages = {"README.md": readme}
    for path in ordered:
        pages[path] = _git("show", f"HEAD:{path}")
    return pages


PAGES = _committed_pages()
BLOCKS = [b for path, text in (PAGES or {}).items() for b in parse(text, path)]
NO_GIT = "not a git checkout with a committed README.md: there is nothing to clone"
needs_git = pytest.mark.skipif(PAGES is None, reason=NO_GIT)
FREE_PORTS = "free ports "
PAGES_CUT_SHORT: dict[str, str] = {}
"""page -> the ``needs free ports`` block skipped on it: the page's later blocks are skipped
too (they read what it made). Only where no network namespace of its own can be had."""


@dataclass
class Clone:
    path: Path
    env: dict[str, str]


def _newcomer_env() -> dict[str, str]:
    dropped = ("RAGPULSE_", "OPENAI_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    for name in ("PYTHONPATH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "VIRTUAL_ENV"):
        env.pop(name, None)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Clone:
    if PAGES is None:
        pytest.skip(NO_GIT)
    if not (BIN / "ragpulse").exists():
        pytest.skip(f"no ragpulse script beside {sys.executable}: install the package first")
    path = tmp_path_factory.mktemp("newcomer") / "ragpulse"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(path)], check=True, timeout=300)
    venv = path / ".venv"
    venv.mkdir()
    (venv / "bin").symlink_to(BIN, target_is_directory=True)
    (venv / ".installed").touch()
    an_hour_ago = time.time() - 3600
    os.utime(path / "pyproject.toml", (an_hour_ago, an_hour_ago))
    env = _newcomer_env()
    # A newcomer's cache is empty: the judge's disk cache (ragpulse eval's default) must not
    # answer the judge block from an earlier run of this test.
    env["RAGPULSE_CACHE_DIR"] = str(tmp_path_factory.mktemp("newcomer-cache"))
    plan = subprocess.run(
        ["make", "-n", "install"], cwd=path, env=env, capture_output=True, text=True, timeout=120
    )
    assert "pip" not in plan.stdout, f"make would reinstall into the shared venv:\n{plan.stdout}"
    return Clone(path, env)


@functools.cache
def _own_network() -> bool:
    """Whether a block can run in a network namespace of its own (root, or user namespaces,
    and iproute2 to bring its loopback up): there every port is free."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    try:
        probe = subprocess.run(
            ["unshare", "--net", "ip", "link", "set", "lo", "up"], capture_output=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def _run(script: str, clone: Clone, own_network: bool = False) -> subprocess.CompletedProcess[str]:
    """bash -e -o pipefail on the block, in its own process group (killed on a hang) and,
    with ``own_network``, in a network namespace of its own with only a loopback."""
    command = ["bash", "-e", "-o", "pipefail", "-c", script]
    if own_network:
        up = 'ip link set lo up && exec bash -e -o pipefail -c "$1"'
        command = ["unshare", "--net", "bash", "-c", up, "bash", script]
    proc = subprocess.Popen(
        command,
        cwd=clone.path, env=clone.env, text=True, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += f"\n[killed: still running after {BLOCK_TIMEOUT_S}s]"
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _commands(script: str) -> Iterator[list[str]]:
    """A script's simple commands as words: continuations joined, comments and
    leading ``VAR=value`` assignments dropped (a heredoc's lines come out too)."""
    for line in script.replace("\\\n", " ").splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:  # not shell syntax: a heredoc's data
            continue
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            words = words[1:]
        if words:
            yield words


def _check_outputs(block: Block, clone: Clone) -> None:
    """The files the docs say an ``eval`` writes are there."""
    for words in _commands(block.script()):
        if words[:2] != ["ragpulse", "eval"]:
            continue
        out = clone.path / words[words.index("-o") + 1]
        rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        assert rows, f"{out} is empty"
        if "--replay" not in words:
            # A harness case skipped for its condition says why instead (never generated).
            scored = all("results" in row or "skipped" in row for row in rows)
            assert scored, f"a row of {out} has no results"
            continue
        stem = out.with_suffix("")
        written = [Path(f"{stem}.report.md"), Path(f"{stem}.summary.json")]
        written += [Path(f"{stem}.report.html")] if "--html" in words else []
        missing = [str(p) for p in written if not p.is_file()]
        assert not missing, f"the replay report files the docs name are missing: {missing}"


def _write_files(block: Block, clone: Clone) -> None:
    """The titled blocks above ``block`` on its page: files the reader saved by now."""
    for earlier in BLOCKS:
        if earlier.source != block.source or earlier.line > block.line or not earlier.title:
            continue
        target = (clone.path / earlier.title).resolve()
        assert clone.path.resolve() in target.parents, f"{earlier.where}: title leaves the clone"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(earlier.body, encoding="utf-8")


def _taken(ports: str) -> list[int]:
    """Those of ``4317,4318`` that cannot be bound on 127.0.0.1 right now."""
    taken = []
    for port in (int(p) for p in ports.split(",")):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                taken.append(port)
    return taken


SHELL_BLOCKS: list[Block | None] = [b for b in BLOCKS if b.is_shell] or [None]


@pytest.mark.integration
@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=lambda b: b.id if b else "none")
def test_shell_block_runs_as_written(
    block: Block | None, clone: Clone, request: pytest.FixtureRequest
) -> None:
    if block is None:
        pytest.skip("no page has a shell block")
    if block.marker == "skip":
        pytest.skip(f"{block.where} marked skip: {block.why.strip('()')}")
    if block.marker == "synopsis":
        _check_synopsis(block, clone)
        return
    if block.source in PAGES_CUT_SHORT:
        pytest.skip(f"{block.where} builds on {PAGES_CUT_SHORT[block.source]}, which was skipped")
    ports = block.why.removeprefix(FREE_PORTS) if block.why.startswith(FREE_PORTS) else None
    if block.marker == "needs" and block.why in TOOL_NEEDS:
        # The session's Phoenix or MLflow (tests/support/tracing_backends.py), shared with
        # the live tests: on its usual port unless that was taken when it started.
        tool = request.getfixturevalue(TOOL_NEEDS[block.why])
        if f"127.0.0.1:{tool.port}" not in block.why:
            pytest.skip(
                f"{block.where} needs {block.why}; the port was taken, it runs on {tool.port}"
            )
    elif block.marker == "needs" and block.why != JUDGE_NEED and ports is None:
        pytest.skip(f"{block.where} needs {block.why}")
    own_network = ports is not None and _own_network()
    if ports is not None and not own_network and (taken := _taken(ports)):
        PAGES_CUT_SHORT[block.source] = block.where  # the page's later blocks use its output
        pytest.skip(f"{block.where} needs free ports {ports}, and {taken} is taken")
    judge: JudgeServer | None = None
    if block.marker == "needs" and block.why == JUDGE_NEED:
        try:
            judge = JudgeServer(port=8000).__enter__()  # where the docs point
        except OSError as exc:
            pytest.skip(f"{block.where} needs {JUDGE_NEED}, and it is taken: {exc}")
    _write_files(block, clone)
    try:
        done = _run(block.script(), clone, own_network)
    finally:
        if judge is not None:
            judge.__exit__(None, None, None)
    print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
    assert done.returncode == 0, (
        f"{block.where} failed (exit {done.returncode}):\n{block.body}\n"
        f"--- stdout (tail)\n{done.stdout[-4000:]}\n--- stderr (tail)\n{done.stderr[-4000:]}"
    )
    if judge is not None:
        assert judge.seen.requests, "the command never called the judge it names"
    _check_outputs(block, clone)


def _names(help_text: str, flag: str) -> bool:
    """``--dir`` is in the help as a whole flag (``--dir-x`` does not count)."""
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text) is not None


def _check_synopsis(block: Block, clone: Clone) -> None:
    helps: dict[tuple[str, ...], str] = {}
    problems = []
    for command in synopsis_commands(block.body):
        sub, flags = split_synopsis(command)
        key = tuple(sub)
        if key not in helps:
            done = _run(shlex.join(["ragpulse", *sub, "--help"]), clone)
            assert done.returncode == 0, f"`ragpulse {' '.join(sub)} --help` failed:\n{done.stderr}"
            helps[key] = done.stdout
        absent = [f for f in flags if not _names(helps[key], f)]
        if absent:
            problems.append(f"{command!r}: not in `ragpulse {' '.join(sub)} --help`: {absent}")
    assert not problems, f"{block.where}: synopsis flags that do not exist:\n" + "\n".join(problems)


@needs_git
def test_other_blocks_parse_and_hide_no_command() -> None:
    for block in BLOCKS:
        if block.tag in ("yaml", "yml"):
            yaml.safe_load(block.body)
        elif block.tag == "toml":
            tomllib.loads(block.body)
        elif block.tag == "json":
            lines = block.body.splitlines() if (block.title or "").endswith(".jsonl") else []
            for line in lines or [block.body]:
                json.loads(line)
        elif block.tag == "python":
            compile(block.body, block.where, "exec")
        elif not block.is_shell:
            first = next((ln.strip() for ln in block.body.splitlines() if ln.strip()), "")
            assert not first.startswith(COMMAND_WORDS), (
                f"{block.where}: a {block.tag or 'untagged'} block starts like a command "
                f"({first!r}): tag it sh so the README test runs it, or mark it"
            )


@needs_git
def test_public_names_the_docs_call_exist() -> None:
    """``ragpulse.X(...)`` in README or docs names a public function (feedback's ids too)."""
    assert PAGES is not None
    text = "\n".join(PAGES.values())
    called = set(re.findall(r"(?<![\w.])ragpulse\.([a-z_][a-z0-9_]*)\(", text))
    assert {"feedback", "current_trace_id", "current_span_id"} <= called
    missing = sorted(name for name in called if name not in ragpulse.__all__)
    assert not missing, f"the docs call ragpulse.{missing} that the package does not export"


@needs_git
def test_exporter_names_in_the_settings_table_match_the_code() -> None:
    assert PAGES is not None
    page = PAGES["docs/how-to/instrument.md"]
    row = next(line for line in page.splitlines() if line.startswith("| `exporter` ("))
    options = row.split("(", 1)[1].split(")", 1)[0]
    names = set(re.findall(r"`(\w+)`", options)) - {"SpanExporter"}
    assert names == set(_EXPORTER_NAMES), (row, _EXPORTER_NAMES)
    assert 'exporter="kafka"' in "\n".join(PAGES.values()) and "kafka" in _EXPORTER_NAMES


HISTORY = r"\bissues? #?[0-9]|this round|the issue's|\.\./shared|/work/|before the fix|was fixed"
"""Development history a user cannot follow (issue numbers, rounds of work, paths outside
the repository): user-facing pages speak to users."""


@needs_git
def test_user_docs_carry_no_development_history() -> None:
    done = subprocess.run(
        ["git", "-C", str(ROOT), "grep", "-n", "-i", "-E", HISTORY, "HEAD", "--",
         "README.md", "docs/"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, f"development history in user docs:\n{done.stdout}"


def test_markers_are_parsed_strictly() -> None:
    from support.readme_blocks import ReadmeError

    ok = parse("<!-- readme-test: needs docker -->\n\n```sh\ndocker ps\n```\n")
    assert [(b.marker, b.why, b.is_shell) for b in ok] == [("needs", "docker", True)]
    console = parse("```console\n$ ragpulse --help\nusage: ragpulse\n```\n")
    assert console[0].script() == "ragpulse --help"
    for bad in (
        "<!-- readme-test: skipp (typo) -->\n```sh\nls\n```\n",  # unknown kind
        "<!-- readme-test: skip (x) -->\nsome prose\n```sh\nls\n```\n",  # not before a block
        "```sh\nls\n",  # never closed
    ):
        with pytest.raises(ReadmeError):
            parse(bad)
    sub, flags = split_synopsis("ragpulse regression list [--dir DIR | --config FILE]")
    assert (sub, flags) == (["regression", "list"], ["--config", "--dir"])
