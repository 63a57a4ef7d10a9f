"""The gate refuses a reference chain that names a row before the conversation gave it (world_format/evidence.py):
a kit would teach an agent to guess it."""

from __future__ import annotations

from pathlib import Path

from conftest import write_world
from test_family import cancel_family, family_world

from blobkit.builder.gate import gate_task
from world_format.family import fill
from world_format.loader import load_world
from world_format.models import Task
from world_format.procedure_check import ProcedureChecker


def _grounding(matrix: dict[str, object]) -> list[str]:
    reasons = matrix["rejected_because"]
    assert isinstance(reasons, list)
    return [reason for reason in reasons if reason.startswith("grounding:")]


def test_a_reference_naming_an_order_nobody_stated_is_refused_and_one_the_customer_stated_is_not(
        tmp_path: Path) -> None:
    loaded = load_world(write_world(tmp_path, family_world(cancel_family())))
    runtime = loaded.runtime()
    try:
        with runtime.guard.host() as conn:
            order_id, email = conn.execute(
                "SELECT o.id, c.email FROM orders o JOIN customers c ON c.id = o.customer_id "
                "WHERE o.status = 'pending' ORDER BY o.id LIMIT 1").fetchone()
        values = {"order_id": order_id, "email": email, "total": 1.0, "total_text": "1.00"}
        checker = ProcedureChecker.of(runtime)
        stated = fill(Task.model_validate(cancel_family()), values)
        assert _grounding(gate_task(runtime, stated, None, checker=checker)) == []
        unstated = stated.model_copy(update={"instruction": f"Hi, I'm {email}. Please cancel my pending order."})
        reasons = _grounding(gate_task(runtime, unstated, None, checker=checker))
        assert reasons == [f"grounding: step 1 (cancel_order) gives order_id={order_id}, which neither the customer "
                           "nor an earlier observation stated: an agent could only guess it"]
    finally:
        runtime.close()
