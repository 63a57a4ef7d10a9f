"""The ``handoff`` template: the customer asks for what the world's hand-off rule sends to a human.

The case is about one row (:func:`world_format.handoff.handoff_target`: the row the hand-off tool names, else the
identified customer's own): the customer, identified first, asks for one of the rule's ``when`` requests (seeded per
row); the reference identifies them, calls the hand-off tool with the rule's ``arguments``, the row's key and the
request as the summary, and answers the rule's ``message``. The verifier requires the identification, that call,
that message, that no write tool was called and that nothing changed.
"""

from __future__ import annotations

import random
from typing import Any

from world_format.canonical import canonical_json
from world_format.handoff import HandoffTarget, summary_params
from world_format.keys import normalize_key
from world_format.models import Step

from .addressing import Address
from .mint import COMPLETED, Instance, Minter, answer_check, check, key_arguments, make_task
from .mint_specs import TaskSpec, key_table


def _request(m: Minter, spec: TaskSpec, key: Any, address: Address) -> str:
    """One of the rule's requests (seeded per row), as the customer says it about the case's row."""
    rule = m.world.procedures.handoff
    assert rule is not None
    named = canonical_json(normalize_key(key))
    text = rule.when[random.Random(f"{m.seed}:{spec.task_id}:{named}").randrange(len(rule.when))]
    if "{row}" in text:
        return text.replace("{row}", address.asked)
    return text if address.is_customer else f"{text} It is about {address.asked}."


def handoff(m: Minter, spec: TaskSpec, key: Any, variant: int) -> Instance | None:
    """The hand-off case on row ``key``; None when no identified customer could ask about it or the chain breaks."""
    rule, tool = m.world.procedures.handoff, m.world.tool(spec.tool("handoff"))
    assert rule is not None and tool is not None
    address = m.address(spec, key)
    if address is None or not address.checks:
        return None
    table, params = key_table(m.world, spec.anchor), spec.params("handoff")
    said = _request(m, spec, key, address)
    summary = f'The customer says: "{said}"'
    named = address.key_arguments(params, table, key) if params else {}
    arguments = {**rule.arguments, **named,
                 **{name: summary for name in summary_params(tool, rule, HandoffTarget(spec.anchor, params))}}
    steps = [*address.steps, Step(tool=tool.name, arguments=arguments)]
    if m.run(steps) is None:
        return None
    literal = key_arguments(spec, "handoff", table, key) if params else {}
    others = tuple(sorted({p.explanation for t in m.world.tools for p in t.preconditions if p.explanation}
                          | {COMPLETED}))
    checks = address.ordered(tool.name) + [
        check("tool_called", tool=tool.name, arguments={**rule.arguments, **literal}),
        answer_check(rule.message, others=others),
        *(check("tool_not_called", tool=writer.name) for writer in m.world.tools if writer.effect == "write"),
        check("unchanged_except")]
    instruction = address.intro + said[0].upper() + said[1:]
    return m.instance(spec, key, make_task(spec, key, instruction, steps, rule.message, checks))
