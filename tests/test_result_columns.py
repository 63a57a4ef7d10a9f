"""Which stored column a tool's result column holds values of (world_format/result_columns.py)."""

from __future__ import annotations

from pathlib import Path

from world_format.loader import load_world
from world_format.result_columns import precondition_reads, result_sources, root_column

ROOT = Path(__file__).resolve().parent.parent


def test_result_columns_are_traced_through_the_sql_to_the_column_they_finally_name() -> None:
    world = load_world(ROOT / "examples" / "retail_desk" / "world.json").world
    sources = result_sources(world)
    assert sources["find_customer_by_email"]["id"] == {"customers.id"}
    assert sources["list_orders"]["id"] == {"orders.id"}
    assert sources["get_order"]["customer_id"] == {"customers.id"}  # orders.customer_id references customers.id
    assert sources["list_order_items"]["id"] == {"order_items.id", "products.id"}  # the join reads both
    assert sources["issue_refund"]["order_id"] == {"orders.id"}
    assert "refund_id" not in sources["issue_refund"]  # an alias reads no column of that name: unknown
    assert "item_count" not in sources["get_order"]  # computed
    assert root_column(world, "order_items.order_id") == "orders.id"
    assert root_column(world, "orders.status") == "orders.status"


def test_every_example_tool_that_runs_sql_is_traced() -> None:
    for example in sorted((ROOT / "examples").glob("*/world.json")):
        world = load_world(example).world
        sources = result_sources(world)
        assert set(sources) == {tool.name for tool in world.tools if tool.statements}, example
        assert any(sources.values()), example


def test_a_preconditions_reads_are_the_columns_sqlite_reports_reading_table_by_table() -> None:
    world = load_world(ROOT / "examples" / "airline_desk" / "world.json").world
    reads = precondition_reads(world)
    exists, confirmed, flown = reads["cancel_booking"] or ()
    assert exists == {("bookings", "id")} and confirmed == {("bookings", "id"), ("bookings", "status")}
    # "status" in a subquery on the legs is the legs' status, not the booking's (a name in the text would be both)
    assert flown == {("booking_legs", "booking_id"), ("booking_legs", "status")}
    assert ("booking_legs", "extras") in (reads["set_meal"] or ())[2]  # read inside json_extract(extras, '$.meal')
    assert "get_booking" not in reads  # no preconditions


def test_a_tool_whose_precondition_does_not_run_on_the_schema_reads_what_is_unknown() -> None:
    world = load_world(ROOT / "examples" / "airline_desk" / "world.json").world
    tools = tuple(tool.model_copy(update={"preconditions": (tool.preconditions[0].model_copy(
        update={"sql": "SELECT status FROM no_such_table"}),)}) if tool.name == "set_meal" else tool
        for tool in world.tools)
    reads = precondition_reads(world.model_copy(update={"tools": tools}))
    assert reads["set_meal"] is None and reads["cancel_booking"] is not None
