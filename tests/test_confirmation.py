"""Confirmation means the agent asked about this write (issue 24 item 4, issue 28 item 2, handed kind
04-confirmation-never-asked): the world declares what a confirmation request states; minted requests state it; the
scripted "yes" answers only a turn that asks to confirm the expected write, anything else gets the world's unclear
reply and the write that follows fails; info/verify count rows whose confirmation omits a detail."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, handed_evidence, reference_lines, score_trajectories, write_world
from typer.testing import CliRunner

from blobkit.cli import app
from trainers.evaluation import run_episode
from trainers.formats import FORMATS
from trainers.turns import PerTurn
from world_format.confirmation import request_problem
from world_format.errors import WorldFormatError
from world_format.kit import open_kit
from world_format.loader import load_world
from world_format.models import ConfirmedWrite
from world_format.procedure_check import report_of

AIRLINE = "airline_desk"
MISLEADING = "I will also cancel every other booking you hold and charge a $500 fee. OK?"


def _confirm_lines(kit: Path, side: str = "eval") -> tuple[list[dict[str, Any]], dict[str, Any]]:
    with open_kit(kit) as opened:
        cases = {case.case_id: case for case in opened.cases(side) if any(t.confirms for t in case.task.turns)}
    return [line for line in reference_lines(kit, side) if line["case_id"] in cases], cases


def _asked(line: dict[str, Any], question: str) -> dict[str, Any]:
    """The reference trajectory with the agent's confirmation question replaced (the handed files' transformation)."""
    messages = [dict(m) for m in line["messages"] if m["role"] == "assistant"]
    index = next(i for i, m in enumerate(messages) if not m.get("tool_calls") and i < len(messages) - 1)
    messages[index] = {"role": "assistant", "content": question}
    return {"case_id": line["case_id"], "messages": messages}


@pytest.mark.parametrize("question", ["", "Cancelling now; no need to reply.", MISLEADING,
                                      "Shall I go ahead?", "Is there anything else I can help you with?"])
def test_a_turn_that_does_not_ask_about_the_write_gets_no_yes_and_the_write_fails(
        example_kits: dict[str, Path], question: str, tmp_path: Path) -> None:
    """Kind 04 by its stated transformation on this build's case ids, with siblings: an empty turn, a statement,
    consent asked for something else, a question that names nothing, an unrelated question."""
    for side in ("eval", "train") if question == "" else ("eval",):  # training cases too, for one shape
        lines, _ = _confirm_lines(example_kits[AIRLINE], side)
        assert lines
        scored = score_trajectories(example_kits[AIRLINE], [_asked(line, question) for line in lines],
                                    tmp_path / f"{side}.jsonl")
        assert scored["exit_code"] == 1 and scored["summary"]["passed"] == 0, (side, scored["summary"])
        assert all("unconfirmed_write" in case["verdict"]["reason"] for case in scored["cases"])


def test_a_question_about_another_booking_or_action_gets_no_yes(example_kits: dict[str, Path], tmp_path: Path) -> None:
    lines, cases = _confirm_lines(example_kits[AIRLINE])
    others = [case.task.turns[0].confirms.states[0] for case in cases.values()]
    made = []
    for line, other in zip(lines, others[1:] + others[:1], strict=True):
        mine = cases[line["case_id"]].task.turns[0].confirms.states[0]
        made.append(_asked(line, f"Shall I cancel booking {other} now?"))
        made.append(_asked(line, f"Shall I change the meal on booking {mine}?"))
    scored = score_trajectories(example_kits[AIRLINE], made[::2], tmp_path / "other-row.jsonl")
    assert scored["summary"]["passed"] == 0
    scored = score_trajectories(example_kits[AIRLINE], made[1::2], tmp_path / "other-action.jsonl")
    assert scored["summary"]["passed"] == 0


def test_a_question_in_the_agents_own_words_that_states_the_write_gets_the_yes(example_kits: dict[str, Path],
                                                                             tmp_path: Path) -> None:
    lines, cases = _confirm_lines(example_kits[AIRLINE])
    made = []
    for line in lines:
        states = cases[line["case_id"]].task.turns[0].confirms.states
        made.append(_asked(line, f"Just to be sure: do you want me to cancel {', '.join(states)}? Please say yes."))
    scored = score_trajectories(example_kits[AIRLINE], made, tmp_path / "own-words.jsonl")
    assert scored["summary"]["pass_rate"] == 1.0, scored["cases"][:2]
    control = score_trajectories(example_kits[AIRLINE], lines, tmp_path / "reference.jsonl")
    assert control["summary"]["pass_rate"] == 1.0


def _remapped(kit: Path, handed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The handed lines on this build's case ids: the held-out case whose reference makes the same calls."""
    def calls(messages: list[dict[str, Any]]) -> str:
        return json.dumps([c["function"] for m in messages for c in m.get("tool_calls") or []], sort_keys=True)

    by_calls = {calls(line["messages"]): line["case_id"] for line in reference_lines(kit)}
    return [{**line, "case_id": by_calls[calls(line["messages"])]} for line in handed
            if calls(line["messages"]) in by_calls]


@pytest.mark.parametrize("name", ["empty.jsonl", "no_question.jsonl", "misleading.jsonl"])
def test_the_handed_unasked_confirmations_pass_nothing(airline_first_kit: Path, name: str, tmp_path: Path) -> None:
    folder = handed_evidence("04-confirmation-never-asked")
    if folder is None:
        pytest.skip("the handed evidence is not on this machine")
    handed = [json.loads(line) for line in (folder / name).read_text(encoding="utf-8").splitlines()]
    # the evidence was recorded on the airline world at its first size (its bookings and emails are that world's)
    lines = _remapped(airline_first_kit, handed)
    assert len(lines) >= len(handed) // 2  # minting changed the family's ids: the lines are matched by their calls
    scored = score_trajectories(airline_first_kit, lines, tmp_path / name)
    assert scored["exit_code"] == 1 and scored["summary"]["passed"] == 0, scored["summary"]


def test_the_customer_waits_for_a_proper_question_in_an_episode(example_kits: dict[str, Path]) -> None:
    lines, cases = _confirm_lines(example_kits[AIRLINE])
    line = lines[0]
    texts = []
    for message in line["messages"]:
        if message["role"] != "assistant":
            continue
        calls = message.get("tool_calls") or []
        texts.append("".join(f"<tool_call>\n{json.dumps(c['function'])}\n</tool_call>" for c in calls)
                     if calls else message["content"])
    question = next(i for i, t in enumerate(texts) if not t.startswith("<tool_call>"))
    patient = [*texts[:question], "", *texts[question:]]  # first an empty turn, then the real question
    with open_kit(example_kits[AIRLINE]) as kit:
        runtime = kit.world().runtime()
    seen: list[list[dict[str, Any]]] = []

    def generate(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        seen.append(list(messages))
        return patient[len(seen) - 1] if len(seen) <= len(patient) else "Done."
    try:
        result = run_episode(PerTurn(generate, FORMATS["hermes"]), runtime, cases[line["case_id"]], 12)
    finally:
        runtime.close()
    unclear = kit.world().world.procedures.unclear_reply
    assert seen[question + 1][-1] == {"role": "user", "content": unclear}
    assert seen[question + 2][-1]["content"] == cases[line["case_id"]].task.turns[0].user
    assert result.passed, result.verdict.reason


def test_minted_confirmations_state_what_the_world_declares(example_kits: dict[str, Path]) -> None:
    with open_kit(example_kits[AIRLINE]) as kit:
        minted = [c for c in kit.cases("train") + kit.cases("eval") if c.template == "write_confirmed"]
    assert minted
    for case in minted:
        turn = case.task.turns[0]
        assert turn.confirms is not None and turn.confirms.tool == "cancel_booking"
        booking, total = turn.confirms.states
        assert turn.assistant == (f"Your booking {booking} has not yet flown 1. "  # the deciding value, restated
                                  f"I found your booking {booking} (total: {total}). Shall I cancel it now?")
        assert total.startswith("$") and len(total.split(".")[1]) == 2


def test_every_example_kit_has_no_row_whose_confirmation_omits_a_detail_and_a_changed_row_is_counted(
        example_kits: dict[str, Path]) -> None:
    for name, path in example_kits.items():
        summary = json.loads(CliRunner().invoke(app, ["info", str(path), "--json"]).stdout)
        assert summary["procedures"]["violating_rows"] == 0, (name, summary["procedures"])
    with open_kit(example_kits[AIRLINE]) as kit:
        rows = [row for row in kit.rows() if row["metadata"]["template"] == "write_confirmed"][:3]
        runtime = kit.world().runtime()
    try:
        vague = [{**row, "messages": [{**m, "content": "I found your booking. Shall I cancel it now?"}
                                      if m["role"] == "assistant" and not m.get("tool_calls")
                                      and m is not row["messages"][-1] else m for m in row["messages"]]}
                 for row in rows]
        report = report_of(runtime, vague)
    finally:
        runtime.close()
    assert report["violating_rows"] == 3 and report["violations"] == {"confirmation_incomplete": 3}
    assert "does not state" in report["examples"][0]["detail"]


def test_every_admitted_case_fails_the_unconfirmed_agents(example_kits: dict[str, Path]) -> None:
    with open_kit(example_kits[AIRLINE]) as kit:
        cases = kit.cases("train") + kit.cases("eval")
    for agent in ("unconfirmed", "unconfirmed-empty", "unconfirmed-statement", "unconfirmed-other"):
        applied = [case.probes[agent] for case in cases if case.probes[agent] != "n/a"]
        assert len(applied) == sum(1 for c in cases if c.task.turns) and set(applied) == {"fail"}, agent
    # leaving the last detail out applies wherever the other details do not already state it
    vague = [case.probes["unconfirmed-vague"] for case in cases if case.probes["unconfirmed-vague"] != "n/a"]
    assert len(vague) >= sum(1 for c in cases if c.task.turns) - 3 and set(vague) == {"fail"}  # 94 of 97


@pytest.mark.parametrize(("text", "problem"), [
    ("", "the turn is empty"), ("I will cancel booking KXTRAB now.", "no question"),
    ("Shall I go ahead with booking KXTRAB?", "does not name the action (cancel)"),
    ("Shall I cancel your booking?", "does not state 'KXTRAB'"),
    ("Shall I cancel booking KXTRAB ($310)?", "does not state '$310.50'"),
    ("Cancelling booking KXTRAB, total $310.50: OK?", None),
    ("Should I cancel KXTRAB? It cost 310.50 dollars.", None)])
def test_a_request_names_the_action_and_states_every_detail(text: str, problem: str | None) -> None:
    world = load_world(ROOT / "examples" / AIRLINE / "world.json").world
    found = request_problem(world, ConfirmedWrite(tool="cancel_booking", states=("KXTRAB", "$310.50")), text)
    assert (found is None) if problem is None else (found is not None and problem in found)


@pytest.mark.parametrize(("change", "message"), [
    (lambda w: w["tools"][9].update(confirm={"states": ["refund"]}), "/tools/9/confirm/states: 'refund' is not a "
                                                                     "parameter of cancel_booking"),
    (lambda w: w["tools"][9].update(confirm={"states": ["flights.fare"]}), "'flights.fare' is not a column of a row "
                                                                          "cancel_booking names"),
    (lambda w: w["tasks"][0]["turns"][0]["confirms"].update(tool="list_legs"), "/tasks/0/turns/0/confirms/tool: "
                                                                              "'list_legs' is not a write")])
def test_a_confirmation_that_cannot_be_judged_is_refused_at_load(tmp_path: Path, change: Any, message: str) -> None:
    world = json.loads((ROOT / "examples" / AIRLINE / "world.json").read_text(encoding="utf-8"))
    assert world["tools"][9]["name"] == "cancel_booking"
    change(world)
    with pytest.raises(WorldFormatError, match=message.replace("(", r"\(").replace("$", r"\$")):
        load_world(write_world(tmp_path, world))


LOOKED_UP = {"get_leg": "Your leg {position} of booking {booking_id} has status {status}.",
             "get_booking": "Your booking {id} has not yet flown {not_yet_flown}."}
"""How airline's deciding turns restate the row a look-up returned: the leg's status its write's precondition reads;
the booking's ``not_yet_flown``, the expression cancel_booking's precondition computes (the booking's ``status`` is
left out: get_booking's SQL also reads the legs' ``status``, so the name alone could be stated wrong)."""


def _deciding_turn(row: dict[str, Any]) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """(the last look-up's observation, its restatement, the assistant turn after it) of an airline write row."""
    messages = row["messages"]
    index = max(i for i, m in enumerate(messages) if m["role"] == "tool" and m["name"] in LOOKED_UP)
    looked = json.loads(messages[index]["content"])
    return looked, LOOKED_UP[messages[index]["name"]].format(**looked), messages[index + 1]


def test_a_write_decision_first_restates_the_looked_up_value_it_depends_on(example_kits: dict[str, Path]) -> None:
    """Airline's minted writes: the turn after the look-up's observation starts by restating the row's status as
    the observation showed it, then calls the write (set_meal on a confirmed leg), refuses (a leg no longer
    confirmed, or one that already has the meal) or asks to confirm (cancel_booking on a confirmed booking)."""
    with open_kit(example_kits[AIRLINE]) as kit:
        rows = [row for row in kit.rows() if row["metadata"]["template"].startswith("write_")]
    decided = {"write_ok": 0, "write_refused": 0, "write_confirmed": 0}
    for row in rows:
        template = row["metadata"]["template"]
        looked, said, turn = _deciding_turn(row)
        assert turn["content"].startswith(said), (turn["content"], looked)
        if template == "write_ok":
            [call] = turn["tool_calls"]
            assert turn["content"] == said and looked["status"] == "confirmed"
            assert call["function"]["name"] == "set_meal"
        elif template == "write_refused":
            reason = "it already has that meal" if looked["status"] == "confirmed" else "that flight is no longer"
            assert not turn.get("tool_calls") and f": {reason}" in turn["content"]
            assert turn["content"].startswith(f"{said} I'm sorry, I can't change the meal on ")
        else:
            assert not turn.get("tool_calls") and looked["status"] == "confirmed" and looked["not_yet_flown"] == 1
            assert turn["content"].startswith(f"{said} I found ") and turn["content"].endswith("?")
        decided[template] += 1
    assert all(decided.values()), decided


def test_a_whole_booking_with_a_flown_leg_is_refused_after_restating_the_same_value_as_a_confirmed_cancel(
        example_kits: dict[str, Path]) -> None:
    """Airline's two answers to "cancel my booking": the minted confirmation (no leg flown) and the authored refusal
    (a leg flown) look the booking up with the same tool and restate the same ``not_yet_flown`` before deciding."""
    with open_kit(example_kits[AIRLINE]) as kit:
        rows = [row for row in kit.rows() if row["metadata"]["template"] != "lookup_field"
                and any(m["role"] == "tool" and m["name"] == "get_booking" for m in row["messages"])]
    decided = {0: 0, 1: 0}
    for row in rows:
        looked, said, turn = _deciding_turn(row)
        assert turn["content"].startswith(said + " ")
        called = [call["function"]["name"] for m in row["messages"] for call in m.get("tool_calls") or []]
        assert ("cancel_booking" in called) == (looked["not_yet_flown"] == 1), (turn, called)
        decided[looked["not_yet_flown"]] += 1
    assert all(decided.values()), decided


def test_it_helpdesk_repairs_restate_the_device_status_and_warranty_before_deciding(
        example_kits: dict[str, Path]) -> None:
    """send_device_for_repair's explained preconditions read the device's status and compare its warranty end with
    the world's today (not its id, the call's argument): the deciding turn restates the status and the look-up's
    ``under_warranty`` (which computes that same comparison) as find_device_by_asset_tag returned them, and
    calls the write exactly when the device is in use and under warranty."""
    with open_kit(example_kits["it_helpdesk"]) as kit:
        rows = [row for row in kit.rows() if row["metadata"]["template"] in ("write_ok", "write_refused")]
    decided = {"write_ok": 0, "write_refused": 0}
    for row in rows:
        messages = row["messages"]
        found = [i for i, m in enumerate(messages) if m["role"] == "tool" and m["name"] == "find_device_by_asset_tag"]
        if not found:
            continue
        device, turn = json.loads(messages[found[-1]]["content"]), messages[found[-1] + 1]
        said = (f"Your device with asset tag {device['asset_tag']} has status {device['status']} and under warranty "
                f"{device['under_warranty']}.")
        assert turn["content"].startswith(said), (turn["content"], device)
        decided[row["metadata"]["template"]] += 1
        if turn.get("tool_calls"):
            assert turn["content"] == said and device["status"] == "in_use" and device["under_warranty"] == 1
        else:
            assert device["status"] != "in_use" or device["under_warranty"] == 0
            assert "I'm sorry, I can't send your device" in turn["content"]
    assert all(decided.values()), decided
