"""Hypothesis mutates trajectory files and their text fields: only typed errors or correct verdicts (issue 24).

The file is the reference agent's held-out trajectories of a small kit, every one of which passes. Two families of
mutation:

* **the same conversations, written another way** (keys reordered, content as OpenAI content parts, arguments as
  JSON strings, line separators and chat control strings in the tool and user messages the scorer ignores, CRLF
  line ends, blank lines, ASCII escapes, repeated lines): the score must be exactly the original one — every case,
  every pass, the repeats counted once;
* **damage** (a character inserted or deleted anywhere, a line cut short, a lone surrogate escape, a case id
  changed, a text field replaced by hostile text): the scorer either refuses the file with a typed error that
  names it, or scores it, and then every line the mutation did not touch keeps its verdict.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from blobkit.adversaries import trajectories
from trainers.trajectories import read_trajectories, score_trajectories
from world_format.control import CONTROL_STRINGS
from world_format.errors import BlobkitError
from world_format.kit import Kit, open_kit

HOSTILE = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\r", "\n", "\\ud800", "\\udc00", "\\ud83d\\ude00",
           "\U0001f600", "e\u0301", '"', "\\", "{", "}", "[", "]", ",", ":", "\x00", *CONTROL_STRINGS]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def scored_kit(kit_path: Path) -> Any:
    with open_kit(kit_path) as kit:
        lines = list(trajectories(kit, "reference", ("eval",)))
        yield kit, lines


def _score(kit: Kit, text: str, path: Path) -> Any:
    path.write_text(text, encoding="utf-8")
    return score_trajectories(kit, read_trajectories(path), str(path))


# --------------------------------------------------------------------------- the same conversations, another way


def _rewrite_message(message: dict[str, Any], draw: Any) -> dict[str, Any]:
    message = dict(message)
    if message["role"] == "assistant":
        text = message.get("content") or ""
        if draw(st.booleans()):
            cut = draw(st.integers(0, len(text)))
            message["content"] = [{"type": "text", "text": text[:cut]}, {"type": "text", "text": text[cut:]}]
        elif not text and message.get("tool_calls") and draw(st.booleans()):
            message["content"] = None
        if message.get("tool_calls") and draw(st.booleans()):
            message["tool_calls"] = [{**c, "function": {**c["function"], "arguments": json.dumps(
                c["function"]["arguments"])}} for c in message["tool_calls"]]
    elif message["role"] in ("tool", "user") and message is not None and draw(st.booleans()):
        message["content"] = str(message.get("content")) + draw(st.sampled_from(HOSTILE))  # ignored by the scorer
    if draw(st.booleans()):
        message = dict(reversed(list(message.items())))
    return message


@st.composite
def rewritten_files(draw: Any, lines: list[dict[str, Any]]) -> tuple[str, int]:
    """(the file's text, how many lines repeat an earlier one)."""
    out, repeats = [], 0
    for line in lines:
        rewritten = {**line, "messages": [_rewrite_message(m, draw) for m in line["messages"]]}
        if draw(st.booleans()):
            rewritten = dict(reversed(list(rewritten.items())))
        out.append(json.dumps(rewritten, ensure_ascii=draw(st.booleans()),
                              indent=None, separators=draw(st.sampled_from([(",", ":"), (", ", ": ")]))))
        if draw(st.integers(0, 9)) == 0:
            out.append(out[-1])
            repeats += 1
    end = draw(st.sampled_from(["\n", "\r\n", "\n\n"]))
    return end.join(out) + end, repeats


@SETTINGS
@given(data=st.data())
def test_the_same_conversations_written_another_way_score_exactly_as_the_original(scored_kit: Any, data: Any,
                                                                                  tmp_path: Path) -> None:
    kit, lines = scored_kit
    text, repeats = data.draw(rewritten_files(lines))
    scored = _score(kit, text, tmp_path / "same.jsonl")
    assert (scored.score.cases, scored.score.passed, scored.score.duplicates) == (len(lines), len(lines), repeats)
    assert scored.score.partial is False and all(r.parse_failures == 0 for r in scored.results)


# --------------------------------------------------------------------------- damage


@st.composite
def damaged_files(draw: Any, lines: list[dict[str, Any]]) -> tuple[str, int, str]:
    """(the file's text, the index of the damaged line, what was done)."""
    texts = [json.dumps(line) for line in lines]
    index = draw(st.integers(0, len(texts) - 1))
    line = texts[index]
    kind = draw(st.sampled_from(["insert", "delete", "cut", "case_id", "text"]))
    if kind == "insert":
        at = draw(st.integers(0, len(line)))
        line = line[:at] + draw(st.sampled_from(HOSTILE)) + line[at:]
    elif kind == "delete":
        at = draw(st.integers(0, len(line) - 1))
        line = line[:at] + line[at + draw(st.integers(1, 8)):]
    elif kind == "cut":
        line = line[:draw(st.integers(0, len(line) - 1))]
    elif kind == "case_id":
        other = draw(st.sampled_from([*(x["case_id"] for x in lines), "c-0000000000000000", "", "C-" + "0" * 16]))
        line = json.dumps({**lines[index], "case_id": other})
    else:  # a text field of an assistant turn: the answer, or a string argument, becomes hostile text
        value = json.loads(line)
        hostile = "".join(draw(st.lists(st.sampled_from(HOSTILE), min_size=1, max_size=6)))
        turns = [m for m in value["messages"] if m["role"] == "assistant"]
        turn = draw(st.sampled_from(turns))
        strings = [c["function"]["arguments"] for c in turn.get("tool_calls") or []]
        strings = [args for args in strings if any(isinstance(v, str) for v in args.values())]
        if strings and draw(st.booleans()):
            args = draw(st.sampled_from(strings))
            key = next(k for k, v in args.items() if isinstance(v, str))
            args[key] = json.loads(json.dumps(hostile.replace("\\u", "u")))
        else:
            turn["content"] = draw(st.sampled_from(["", turn.get("content") or ""])) + hostile.replace("\\u", "u")
        line = json.dumps(value, ensure_ascii=False)
    texts[index] = line
    return "\n".join(texts) + "\n", index, kind


@SETTINGS
@given(data=st.data())
def test_damage_gives_a_typed_error_naming_the_file_or_leaves_every_other_verdict_as_it_was(
        scored_kit: Any, data: Any, tmp_path: Path) -> None:
    kit, lines = scored_kit
    text, index, kind = data.draw(damaged_files(lines))
    path = tmp_path / "damaged.jsonl"
    try:
        scored = _score(kit, text, path)
    except BlobkitError as exc:
        event(f"{kind}: {type(exc).__name__}")
        message = str(exc)
        assert str(path) in message and "\n" not in message and "Traceback" not in message, (kind, message)
        return
    event(f"{kind}: scored")
    verdicts = {r.case_id: r.passed for r in scored.results}
    untouched = [line["case_id"] for i, line in enumerate(lines) if i != index]
    assert all(verdicts[case_id] for case_id in untouched), kind
    assert scored.score.cases == len(verdicts) and scored.score.passed == sum(verdicts.values())
    json.dumps([r.to_json() for r in scored.results], ensure_ascii=False).encode("utf-8")  # every record writable
