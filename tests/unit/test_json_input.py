"""``ragpulse eval`` on a dataset saved as one JSON document (a top-level array, or an
object holding the array under a common name), as DeepEval, pandas and many tools save
them: read row by row within a JSONL line's bounds; any other document refused with what
was expected and the one-line conversion.

The real command, in process, against files written here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ragpulse.cli import main
from ragpulse.offline.io import input_layout, open_text
from ragpulse.offline.json_rows import WRAPPERS, Layout, json_rows

ROWS = [
    {"input": "How much storage does the Pro plan include?",
     "actual_output": "The Pro plan includes 100 GB of storage.",
     "retrieval_context": ["The Pro plan includes 100 GB of storage."],
     "expected_output": "100 GB"},
    {"input": "Can I export my notes?",
     "actual_output": "Notes are exported as Markdown from the File menu, with a \"]\" too.",
     "retrieval_context": ["Notes can be exported as Markdown, PDF or HTML from the File menu."],
     "context": None},
]  # fmt: skip


def scored(path: Path) -> list[dict[str, Any]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [
        {f"{r['metric']}/{r['method']}": r["score"] for r in json.loads(line)["results"]}
        for line in lines
    ]


def eval_file(source: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["eval", str(source), "-o", str(out)])
    captured = capsys.readouterr()
    return code, " ".join((captured.out + captured.err).split())


@pytest.mark.parametrize("wrapper", [None, *WRAPPERS])
def test_a_json_array_or_wrapper_is_read_as_its_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], wrapper: str | None
) -> None:
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    assert main(["eval", str(jsonl), "-o", str(tmp_path / "from-jsonl.jsonl")]) == 0
    document: Any = ROWS if wrapper is None else {"alias": "nimbus", wrapper: ROWS}
    source = tmp_path / "dataset.json"
    source.write_text(json.dumps(document, indent=4), encoding="utf-8")  # as DeepEval saves
    out = tmp_path / "out.jsonl"
    code, said = eval_file(source, out, capsys)
    assert code == 0, said
    assert scored(out) == scored(tmp_path / "from-jsonl.jsonl")  # the same rows, the same scores
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["input"] for r in rows] == [r["input"] for r in ROWS]  # the user's own names
    assert "input -> question (2 rows)" in said and "unreadable" not in said


def test_a_one_line_wrapper_is_read_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "dataset.json"
    source.write_text(json.dumps({"data": ROWS}), encoding="utf-8")
    code, said = eval_file(source, tmp_path / "out.jsonl", capsys)
    assert code == 0, said
    assert len(scored(tmp_path / "out.jsonl")) == 2


@pytest.mark.parametrize(
    ("document", "said"),
    [
        ({"version": 2, "items": ROWS},
         "is one JSON object (keys: version, items), not rows: ragpulse reads JSON Lines (one "
         "JSON object a line), a JSON array of objects, or an object holding that array under "
         "data, rows, examples, test_cases or goldens. Convert it with: jq -c '.items[]'"),
        (ROWS[0], "is one row written over several lines: ragpulse reads JSON Lines"),
        (["How much storage does the Pro plan include?"],
         "is a JSON array of strings, not of row objects: ragpulse reads JSON Lines (one JSON "
         "object a line), a JSON array of objects, or an object holding that array under data, "
         "rows, examples, test_cases or goldens (convert: jq -c '.[] | {question: .}'"),
        ([[1, 2]], "is a JSON array of arrays, not of row objects"),
    ],
    ids=["object", "one-row", "strings", "arrays"],
)  # fmt: skip
def test_any_other_document_is_refused_saying_what_was_expected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], document: Any, said: str
) -> None:
    source = tmp_path / "dataset.json"
    source.write_text(json.dumps(document, indent=2), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    code, printed = eval_file(source, out, capsys)
    assert code == 1 and said in printed
    assert not out.exists()  # refused before anything loads


def test_pretty_printed_objects_one_after_another_are_refused_with_the_conversion(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "rows.json"  # what `jq '.[]'` without -c prints
    source.write_text("".join(json.dumps(r, indent=2) + "\n" for r in ROWS), encoding="utf-8")
    code, said = eval_file(source, tmp_path / "out.jsonl", capsys)
    assert code == 1
    assert "holds JSON objects written over several lines each" in said
    assert f"Convert it with: jq -c . {source} > rows.jsonl" in said


def test_a_row_over_the_bound_is_an_error_row_and_the_rows_after_it_are_read(
    tmp_path: Path,
) -> None:
    big = {"question": "q", "contexts": ["x" * 5000], "answer": "a"}
    source = tmp_path / "dataset.json"
    source.write_text(json.dumps([ROWS[0], big, ROWS[1]]), encoding="utf-8")
    layout = input_layout(source)
    assert layout == Layout("array")
    with open_text(source) as f:
        rows = list(json_rows(f, layout, max_row_chars=1000))
    assert [r.line for r in rows] == [1, 2, 3]
    assert rows[0].row == ROWS[0] and rows[2].row == ROWS[1]
    assert rows[1].row is None and rows[1].error is not None
    assert rows[1].error.startswith("row is 5") and "over the 1000 limit" in rows[1].error
    assert len(rows[1].raw) == 1000  # its head kept, the rest read past


def test_a_bad_row_is_kept_with_its_error_and_the_next_rows_still_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = json.dumps(ROWS[0])
    source = tmp_path / "dataset.json"
    source.write_text(f'[{good}, {{"question": "q",}}, {good}', encoding="utf-8")  # not closed
    out = tmp_path / "out.jsonl"
    code, said = eval_file(source, out, capsys)
    assert code == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line.get("line") for line in lines] == [None, 2, None, 4]
    assert lines[1]["error"].startswith("invalid JSON")
    assert lines[3]["error"] == "the array is not closed: the file ends after row 3"
    assert "2 unreadable lines kept with an error field" in said


def test_the_harness_and_replay_read_a_json_array(tmp_path: Path) -> None:
    source = tmp_path / "dataset.json"
    source.write_text(json.dumps(ROWS, indent=2), encoding="utf-8")
    out = tmp_path / "harness.jsonl"
    generator = "ragpulse.cli.demo_app:generate_for"
    assert main(["eval", str(source), "-o", str(out), "--generator", generator,
                 "--conditions", "retrieved"]) == 0  # fmt: skip
    assert len(out.read_text().splitlines()) == 2
    replayed = tmp_path / "replay.jsonl"
    assert main(["eval", str(source), "-o", str(replayed), "--replay",
                 "ragpulse.cli.demo_app:answer"]) == 0  # fmt: skip
    assert len(replayed.read_text().splitlines()) == 2
