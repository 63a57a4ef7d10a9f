"""Entity-level splits: a customer, their orders and items are on one side; the leakage report measures identifiers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from kit_cache import cached_build

from blobkit.builder import BuildConfig, execute_build
from blobkit.builder.leakage import identifying_text
from blobkit.builder.mint import Instance, Minter
from blobkit.builder.sides import Sides, side_of
from trainers.evaluation import EpisodeResult, EvalSummary
from trainers.intervals import rate_record, rate_text, wilson_interval
from world_format.entities import Entities, entity_id, owning_reference
from world_format.loader import load_world
from world_format.models import Task
from world_format.vcode import Verdict

RETAIL = ROOT / "examples" / "retail_desk" / "world.json"
AIRLINE = ROOT / "examples" / "airline_desk" / "world.json"
CONFIG = BuildConfig()


def _per_anchor_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The split as it was before entities: the side a seeded hash of the anchor row alone, nothing withheld from
    training (the report still measures real entities and every row the case names)."""
    def on_side(self: Minter, task_id: str, table: str, key: Any, task: Task) -> Instance:
        touched = [(table, key), *self.sides.entities.rows_named(task.reference)]
        return Instance(task_id, key, task, side_of(self.seed, table, key, self.eval_percent),
                        self.sides.entity(table, key), tuple(touched))

    monkeypatch.setattr(Minter, "on_side", on_side)
    monkeypatch.setattr(Sides, "side", lambda self, table, key: side_of(self.seed, table, key, self.eval_percent))
    monkeypatch.setattr("blobkit.builder.builder.withhold_training",
                        lambda runtime, sides, train, held_out, rows: (train, rows))


def _leakage(world: Path) -> dict[str, Any]:
    return execute_build(world, CONFIG).meta["leakage"]


def _built(world: Path, factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any], dict[str, bytes]]:
    """The build record, kit.json and the case and row files of ``world``'s kit built with CONFIG (the shared build
    of this run, :mod:`kit_cache`: what :func:`execute_build` makes, written)."""
    record = cached_build(world, factory, CONFIG)
    kit = Path(record["kit"]["path"])
    files = {name: (kit / name).read_bytes() for name in ("train_cases.jsonl", "eval_cases.jsonl", "sft.jsonl")}
    return record, json.loads((kit / "kit.json").read_bytes()), files


def _entities(world: Path) -> Entities:
    loaded = load_world(world)
    runtime = loaded.runtime()
    try:
        with runtime.guard.host() as conn:
            return Entities(loaded.world, conn)
    finally:
        runtime.close()


@pytest.fixture(scope="module")
def retail_entities() -> Entities:
    return _entities(RETAIL)


@pytest.fixture(scope="module")
def airline_entities() -> Entities:
    return _entities(AIRLINE)


def test_an_order_and_its_items_and_refunds_belong_to_the_customer_entity(retail_entities: Entities) -> None:
    world = json.loads(RETAIL.read_text())
    order = world["state"]["rows"]["orders"][0]
    item = next(r for r in world["state"]["rows"]["order_items"] if r[1] == order[0])
    assert retail_entities.entity("orders", order[0]) == entity_id("customers", order[1])
    assert retail_entities.entity("order_items", item[0]) == entity_id("customers", order[1])
    refund = world["state"]["rows"]["refunds"][0]
    owner = next(r[1] for r in world["state"]["rows"]["orders"] if r[0] == refund[1])
    assert retail_entities.entity("refunds", refund[0]) == entity_id("customers", owner)


def test_a_product_is_its_own_entity_although_order_items_reference_it(retail_entities: Entities) -> None:
    assert retail_entities.entity("products", 201) == entity_id("products", 201)


def test_a_self_reference_does_not_join_entities() -> None:
    loaded = load_world(ROOT / "examples" / "it_helpdesk" / "world.json")
    employees = loaded.world.state.table("employees")
    assert employees is not None and owning_reference(employees) is None


def test_composite_keys_resolve_to_their_owner(airline_entities: Entities) -> None:
    entities = airline_entities
    rows = json.loads(AIRLINE.read_text())["state"]["rows"]
    booking = rows["bookings"][0]
    assert entities.entity("booking_legs", {"booking_id": booking[0], "position": 1}) == \
        entity_id("customers", booking[1])
    flight = rows["flights"][0]
    key = {"flight_no": flight[0], "flight_date": flight[1]}
    assert entities.entity("flights", key) == entity_id("flights", key)



def test_a_call_naming_a_row_by_several_columns_names_the_row_holding_them_all(airline_entities: Entities) -> None:
    """find_leg names a leg by its booking, flight and date: the leg of that booking, not the first leg anyone holds
    on that flight (which belongs to another customer); a combination no row holds names nothing."""
    entities = airline_entities
    rows = json.loads(AIRLINE.read_text())["state"]["rows"]
    owner = {booking[0]: booking[1] for booking in rows["bookings"]}
    first_on = {}
    for booking_id, position, flight_no, flight_date, *_ in rows["booking_legs"]:
        first_on.setdefault((flight_no, flight_date), (booking_id, position))
    leg = next(leg for leg in rows["booking_legs"] if first_on[(leg[2], leg[3])][0] != leg[0]
               and owner[first_on[(leg[2], leg[3])][0]] != owner[leg[0]])
    arguments = {"booking_id": leg[0], "flight_no": leg[2], "flight_date": leg[3]}
    named = entities.rows_named_by("find_leg", arguments)
    assert named == [("booking_legs", {"booking_id": leg[0], "position": leg[1]})]
    assert entities.entity(*named[0]) == entity_id("customers", owner[leg[0]])
    assert entities.rows_named_by("find_leg", {**arguments, "flight_date": "1999-01-01"}) == []

def test_small_numbers_and_short_texts_are_not_identifiers() -> None:
    assert identifying_text(1) is None and identifying_text(42) is None and identifying_text(True) is None
    assert identifying_text(50001) == "50001" and identifying_text("a@b.co") == "a@b.co"
    assert identifying_text("NW1") is None


@pytest.mark.parametrize("world", [RETAIL, AIRLINE], ids=["retail", "airline"])
def test_the_per_anchor_split_leaked_and_the_entity_split_does_not(world: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path_factory: pytest.TempPathFactory) -> None:
    with monkeypatch.context() as patched:
        _per_anchor_rule(patched)
        before = _leakage(world)
    after = _built(world, tmp_path_factory)[1]["leakage"]
    # the per-anchor rule: held-out cases about customers whose orders are training rows
    assert before["shared_entities"] > 0 and before["held_out_identifiers_in_training"] > 0
    assert after["shared_entities"] == 0 and after["held_out_identifiers_in_training"] == 0
    assert after["held_out_identifiers"] > 0  # the measure looked: held-out prompts do state identifiers


@pytest.mark.parametrize("world", [RETAIL, AIRLINE], ids=["retail", "airline"])
def test_every_case_records_its_entity_and_no_entity_is_on_both_sides(
        world: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    _, meta, files = _built(world, tmp_path_factory)
    sides: dict[str, set[str]] = {}
    for name in ("train_cases.jsonl", "eval_cases.jsonl"):
        for line in files[name].splitlines():
            case = json.loads(line)
            assert case["entity"]
            sides.setdefault(case["entity"], set()).add(case["side"])
    assert all(len(found) == 1 for found in sides.values())
    assert meta["leakage"]["eval_entities"] >= 20
    # one entity count: kit.json's is the number of distinct entities its cases record, which evaluation counts
    for name, side in (("train_cases.jsonl", "train"), ("eval_cases.jsonl", "eval")):
        recorded = {json.loads(line)["entity"] for line in files[name].splitlines()}
        assert meta["leakage"][f"{side}_entities"] == len(recorded)


def test_the_wilson_interval_matches_the_published_values() -> None:
    # statsmodels proportion_confint(5, 10, method="wilson") = (0.2366, 0.7634); 0 of 10: (0, 0.2775)
    assert wilson_interval(5, 10) == (0.2366, 0.7634)
    assert wilson_interval(0, 10) == (0.0, 0.2775) and wilson_interval(10, 10) == (0.7225, 1.0)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_a_printed_rate_is_the_fraction_rounded_once() -> None:
    # 111/220 = 0.50454…: kept as 0.5045, which a second rounding prints as 0.504
    record = rate_record([(i < 111, f"e{i}") for i in range(220)])
    assert record["pass_rate"] == 0.5045 and rate_text(record).startswith("0.505 (111/220 cases, 220 entities")
    assert rate_text({"pass_rate": 0.5, "cases": 4}).startswith("0.500 (2/4 cases")


def test_an_eval_summary_carries_cases_entities_and_the_interval() -> None:
    verdict = Verdict("pass")
    results = tuple(EpisodeResult(f"c-{i}", "lookup_field", "read", verdict if i % 2 else Verdict("fail", "x"),
                                  "a", 1, 0, (), (), f"customers:{i // 2}") for i in range(8))
    summary = EvalSummary(results).to_json()
    assert (summary["cases"], summary["passed"], summary["entities"]) == (8, 4, 4)
    assert summary["interval_95"] == list(wilson_interval(4, 8))
    assert summary["per_template"]["lookup_field"]["cases"] == 8


def test_company_inspect_reports_held_out_entities_against_the_minimum() -> None:
    from blobkit.company import inspect_source
    from blobkit.company.inspect import MIN_HELD_OUT_ENTITIES

    entities = inspect_source(AIRLINE)["admission"]["independent_entities"]
    assert entities["shared"] == 0 and entities["eval_minimum"] == MIN_HELD_OUT_ENTITIES
    assert entities["eval_needed"] == max(0, MIN_HELD_OUT_ENTITIES - entities["eval"])


LIBRARY = ROOT / "examples" / "library_desk" / "world.json"


def test_a_natural_key_value_other_rows_share_names_no_one_and_withholds_nothing(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """The library's patrons identify by name and zip: the zip a held-out patron states is shared by many patrons,
    so training rows that state it stay (they used to withhold 428 of 459 training cases); the held-out patrons'
    emails and card numbers (declared unique) still never appear in a training row."""
    record, meta, files = _built(LIBRARY, tmp_path_factory)
    rows = [json.loads(line) for line in files["sft.jsonl"].decode("utf-8").splitlines()]
    held_out = [json.loads(line) for line in files["eval_cases.jsonl"].decode("utf-8").splitlines()]
    training = "\n".join(json.dumps(row["messages"][1:], ensure_ascii=False) for row in rows)
    world = json.loads(LIBRARY.read_text(encoding="utf-8"))
    patrons = world["state"]["rows"]["patrons"]
    columns = [c["name"] for c in next(t for t in world["state"]["tables"] if t["name"] == "patrons")["columns"]]
    email, zip_code = columns.index("email"), columns.index("zip")
    said = [" ".join([case["task"]["instruction"], *(t["user"] for t in case["task"]["turns"]),
                      case["task"].get("answer") or ""]) for case in held_out]
    stated_zips = {p[zip_code] for p in patrons for text in said if f" {p[zip_code]}" in text}
    assert stated_zips and any(z in training for z in stated_zips)
    held_out_emails = {p[email] for p in patrons for text in said if p[email] in text}
    assert held_out_emails and not any(e in training for e in held_out_emails)
    assert record["train_cases_withheld"] < record["train_cases"] / 10
    assert meta["leakage"]["held_out_identifiers_in_training"] == 0
