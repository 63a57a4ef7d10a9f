"""Which stored column a tool's result column holds values of (world_format/result_columns.py)."""

from __future__ import annotations

from pathlib import Path

from world_format.loader import load_world
from world_format.result_columns import precondition_reads, result_sources, root_column, stating_column

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


def test_a_precondition_is_stated_by_the_result_column_computing_its_expression() -> None:
    """IT's repair precondition compares the warranty end with the world's today; the device look-ups compute the
    same comparison as ``under_warranty``. A differently written expression, a column computing something else, an
    expression found only inside a longer one, and a precondition selecting a constant give None."""
    world = load_world(ROOT / "examples" / "it_helpdesk" / "world.json").world
    repair, finder = world.tool("send_device_for_repair"), world.tool("find_device_by_asset_tag")
    assert repair is not None and finder is not None
    warranty = next(p for p in repair.preconditions if "warranty" in p.sql)
    assert stating_column(warranty.sql, finder.statements[-1]) == "under_warranty"
    in_use = next(p for p in repair.preconditions if "in_use" in p.sql)
    assert stating_column(in_use.sql, finder.statements[-1]) is None
    precondition = "SELECT  status = 'in_use'\n FROM devices WHERE id = :device_id"
    assert stating_column(precondition, "SELECT id, status = 'in_use' AS usable FROM devices") == "usable"
    assert stating_column(precondition, "SELECT id, status='in_use' AS usable FROM devices") is None
    assert stating_column(precondition, "SELECT id, NOT status = 'in_use' AS usable FROM devices") is None
    assert stating_column(precondition, "SELECT id, status = 'in_use' AND 1 AS usable FROM devices") is None
    assert stating_column("SELECT 1", "SELECT 1 AS one FROM devices") is None


def test_a_precondition_without_a_top_level_from_is_stated_by_the_column_computing_it() -> None:
    """Airline's cancel_booking precondition is a NOT EXISTS over the booking's legs, bound to ``:booking_id``, with
    no FROM of its own; get_booking computes the same expression as ``not_yet_flown``. A FROM inside parentheses or
    a quoted string belongs to the expression; without a top-level FROM the expression must name a parameter."""
    world = load_world(ROOT / "examples" / "airline_desk" / "world.json").world
    cancel, booking = world.tool("cancel_booking"), world.tool("get_booking")
    assert cancel is not None and booking is not None
    flown = next(p for p in cancel.preconditions if "flown" in p.sql)
    assert stating_column(flown.sql, booking.statements[-1]) == "not_yet_flown"
    nested = "SELECT EXISTS (SELECT 1 FROM legs WHERE id = :id)"
    assert stating_column(nested, "SELECT a, EXISTS (SELECT 1 FROM legs WHERE id = :id) AS any_leg FROM b") == "any_leg"
    assert stating_column(nested, "SELECT a, EXISTS (SELECT 1 FROM legs WHERE id = :other) AS x FROM b") is None
    quoted = "SELECT note = ' from ' FROM b WHERE id = :id"
    assert stating_column(quoted, "SELECT id, note = ' from ' AS plain FROM b") == "plain"
    unbound = "SELECT EXISTS (SELECT 1 FROM legs)"
    assert stating_column(unbound, "SELECT EXISTS (SELECT 1 FROM legs) AS x FROM b") is None
