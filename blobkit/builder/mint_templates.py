"""The minting templates: each builds one case of a spec on one anchor row, by executing its chain.

Every template starts from the row's :class:`~blobkit.builder.addressing.Address` (the identification and
find-by-natural-key steps a customer's request needs) and adds its own calls; the verifier requires the
address's steps where the world's procedures do. Answers quote values as the world does (labels, money), and
refusals explain in the world's words (a precondition's ``explanation``), never by pasting the tool's error.
Under the ``check_before_write`` procedure a refusal reads the row and does not call the write at all.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from blobkit.wording import counted, sentence
from world_format.affirmed import text_spans
from world_format.chain import resolve_arguments, threaded
from world_format.confirmation import confirmation_request, labelled_states, seed_lookup
from world_format.models import Precondition, Step, Table, Tool, UserTurn
from world_format.result_columns import Read, root_column, stating_column
from world_format.state import quote_identifier

from .addressing import Address, threaded_key
from .arguments import fill
from .mint import (
    COMPLETED,
    CONFIRMATION,
    Builder,
    Instance,
    Minter,
    answer_check,
    check,
    declared_column,
    key_arguments,
    make_task,
    quoted,
    state_checks,
    words,
)
from .mint_handoff import handoff
from .mint_specs import TaskSpec, key_table


def _looked_up(m: Minter, spec: TaskSpec, key: Any, address: Address, role: str,
               needs: set[str] | None = None) -> tuple[list[Step], int, list[Any]] | None:
    """The address's steps plus the call of ``role`` that reads the row, with the index of the step whose
    observation is the row, and the observations; None when a step breaks. The call is left out when an address
    step already returned the row (the identification of the customer, or a find by natural key) holding every
    column in ``needs`` (default: every column the call returns)."""
    table = key_table(m.world, spec.anchor)
    lookup = Step(tool=spec.tool(role), arguments=address.key_arguments(spec.params(role), table, key))
    steps = [*address.steps, lookup]
    ran = m.run(steps)
    if ran is None or not isinstance(ran[0][-1], dict):
        return None
    observations, source = ran[0], address.key_source
    if source is not None and isinstance(observations[source], dict) \
            and (set(observations[-1]) if needs is None else needs) <= set(observations[source]):
        return steps[:-1], source, observations[:-1]
    return steps, len(steps) - 1, observations


def _read_by(m: Minter, tool: Tool, table: Table) -> set[str] | None:
    """The columns of ``table`` that ``tool``'s preconditions read, as SQLite reports them while preparing each
    (:meth:`Minter.precondition_reads`): what an agent checking before the write must have seen; None when that is
    unknown."""
    reads = m.precondition_reads(tool.name)
    if reads is None:
        return None
    return {column for read in reads for column in _of_table(read, table)}


def _of_table(read: frozenset[Read], table: Table) -> set[str]:
    """The columns of ``table`` among one precondition's reads."""
    return {column for name, column in read if name == table.name}


def _argument_columns(tool: Tool, table: Table) -> set[str]:
    """The columns of ``table`` a call of ``tool`` names rather than decides on: the table's key and unique
    columns, the columns the tool's ``anchors`` bind a parameter to, and the columns named as a parameter."""
    properties = tool.parameters.get("properties")
    named = set(properties) if isinstance(properties, dict) else set()
    anchored = {target.partition(".")[2] for target in tool.anchors.values() if target.partition(".")[0] == table.name}
    return named | anchored | set(table.key_columns) | {c.name for c in table.columns if c.unique}


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def _deciding(m: Minter, tool: Tool, table: Table, lookup: str, row: dict[str, Any]) -> list[str] | None:
    """The result columns of the look-up (a call of ``lookup``, observation ``row``) that show, as scalars, what
    ``tool``'s explained preconditions decide on, in declared order: for a precondition whose expression the
    look-up also computes (:func:`world_format.result_columns.stating_column`: ``under_warranty`` for a warranty
    date compared with today, ``not_yet_flown`` for no leg of the booking flown) that column, else the stored
    columns of ``table``'s row it reads; None when unknown. A stored column is left out when the look-up shows it
    under a name its SQL also reads from another column (``status`` beside a computed column reading the legs'
    ``status``): it could be stated wrong; None when that leaves nothing."""
    reads = m.precondition_reads(tool.name)
    looked = m.world.tool(lookup)
    if reads is None or looked is None:
        return None
    named, sources = _argument_columns(tool, table), m.result_sources(lookup)
    stored: set[str] = set()
    computed: list[str] = []
    for precondition, read in zip(tool.preconditions, reads, strict=True):
        if not precondition.explanation:
            continue
        shown = stating_column(precondition.sql, looked.statements[-1]) if looked.statements else None
        if shown is not None and shown in row:
            if shown not in computed:
                computed.append(shown)
        else:
            stored |= _of_table(read, table) - named
    deciding = [c.name for c in table.columns if c.name in stored and c.name in row
                and sources.get(c.name) == {root_column(m.world, f"{table.name}.{c.name}")}]
    return [name for name in deciding + computed if _scalar(row[name])] or None


def _restatement(m: Minter, tool: Tool, table: Table, lookup: str, row: Any, told: str) -> str | None:
    """One line restating the looked-up values the write's explained preconditions read ("Your leg 2 of booking
    VYKYYB has status confirmed."), said in the decision's turn before the call, the refusal or the confirmation
    question, so that the turn copies the deciding value before it decides; None when there is none
    (:func:`_deciding`; ``row`` is the look-up's observation) or the line would hold a newline or "<"."""
    deciding = _deciding(m, tool, table, lookup, row) if isinstance(row, dict) else None
    if not deciding:
        return None
    stated = [f"{words(m.world, table.name, name)} {spoken(row[name])}" for name in deciding]
    line = sentence(f"{told[0].upper()}{told[1:]} has {' and '.join(stated)}")
    return None if "<" in line or "\n" in line else line


def _access_checks(m: Minter, spec: TaskSpec, key: Any, address: Address, steps: list[Step], role: str,
                   then: str | None = None) -> list[dict[str, Any]]:
    """The address's checks — the identification before the chain's first own call (or, when the chain makes
    none past its address, before ``then``: the write that follows) — and, when the chain makes it, the call of
    ``role`` on the row."""
    made = any(step.tool == spec.tool(role) for step in steps[len(address.steps):])
    checks = address.ordered(spec.tool(role) if made else then)
    if made:
        arguments = key_arguments(spec, role, key_table(m.world, spec.anchor), key)
        checks.append(check("tool_called", tool=spec.tool(role), arguments=arguments))
    else:  # the row is the one a find by natural key returned: that find, with the customer's value, is required
        checked = {c.get("tool") for c in checks if c["kind"] == "tool_called"}
        checks += [check("tool_called", tool=step.tool, arguments=dict(step.arguments)) for step in address.steps
                   if step.tool not in checked and not any(threaded(v) for v in step.arguments.values())]
    return checks


def _lookup_field(m: Minter, spec: TaskSpec, key: Any, variant: int) -> Instance | None:
    address, column = m.address(spec, key), spec.field or ""
    found = _looked_up(m, spec, key, address, "lookup", {column}) if address is not None else None
    if address is None or found is None:
        return None
    steps, row_step, observations = found
    value = observations[row_step].get(column)
    if value is None:
        return None
    declared = declared_column(m.world, spec.anchor, column)
    field = words(m.world, spec.anchor, column)
    answer = sentence(f"The {field} of {address.told} is {quoted(value, declared)}")
    checks = _access_checks(m, spec, key, address, steps, "lookup")
    checks += [answer_check(value, field=f"{spec.anchor}.{column}", column=declared), check("unchanged_except")]
    instruction = m.wording(spec, variant, address, field=field)
    return m.instance(spec, key, make_task(spec, key, instruction, steps, answer, checks))


def _natural_value(m: Minter, spec: TaskSpec, key: Any, column: str) -> Any:
    table = key_table(m.world, spec.anchor)
    with m.runtime.guard.host() as conn:
        row = conn.execute(f"SELECT {quote_identifier(column)} FROM {quote_identifier(spec.anchor)} "
                           f"WHERE {quote_identifier(table.primary_key)} = ?", (key,)).fetchone()
    return None if row is None else row[0]


def _find_then_read(m: Minter, spec: TaskSpec, key: Any, variant: int) -> Instance | None:
    """Find the row by its natural key, then list what belongs to it (discovery pairs natural keys only with
    single-column keys, and never with the identification tool: that is aggregate_count on the customer)."""
    natural, table = spec.field or "", key_table(m.world, spec.anchor)
    address, natural_value = m.address(spec, key), _natural_value(m, spec, key, natural)
    if address is None or address.is_customer or natural_value is None:
        return None
    finder, lister = spec.tool("find"), spec.tool("list")
    steps = list(address.steps)
    if not steps or steps[-1].tool != finder:
        steps.append(Step(tool=finder, arguments={spec.param("find"): natural_value}))
    found_at = len(steps) - 1
    steps.append(Step(tool=lister, arguments=threaded_key(spec.params("list"), table, found_at)))
    ran = m.run(steps)
    if ran is None or not isinstance(ran[0][-1], list) or not ran[0][-1] \
            or ran[0][found_at].get(table.primary_key) != key:
        return None
    count = len(ran[0][-1])
    anchor, lister_tool = m.world.state.anchor(spec.anchor), m.world.tool(lister)
    assert anchor is not None and lister_tool is not None
    noun = lister_tool.result_noun or "records"
    named = f"{anchor.label} with {words(m.world, spec.anchor, natural)} {natural_value}"
    mine, yours = ("my ", "your ") if address.checks else ("the ", "the ")
    said = Address((), None, mine + named, yours + named, address.intro)
    answer = f"{said.told[0].upper()}{said.told[1:]} has {counted(count, noun)}."
    checks = address.ordered(finder) + [
        check("tool_called", tool=finder, arguments={spec.param("find"): natural_value}),
        check("tool_called", tool=lister, arguments=key_arguments(spec, "list", table, key)),
        answer_check(count), check("unchanged_except")]
    instruction = m.wording(spec, variant, said, noun=noun)
    return m.instance(spec, key, make_task(spec, key, instruction, steps, answer, checks))


def acting(action: str, named: str, stated: tuple[tuple[str, Any], ...] = ()) -> str:
    """The action phrase applied to a row: its ``{row}`` slot filled ("upgrade {row} to express shipping"), else
    the row after it ("cancel your order 50123"); a ``{parameter}`` slot takes the value the customer states
    ("set the priority of {row} to {priority}")."""
    text = action.replace("{row}", named) if "{row}" in action else f"{action} {named}"
    for name, value in stated:
        text = text.replace("{" + name + "}", spoken(value))
    return text


def spoken(value: Any) -> str:
    """A stated argument as the customer says it: a list as its items ("3 and 4"), anything else as itself."""
    if isinstance(value, list):
        items = [str(item) for item in value]
        return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
    return str(value)


def _failed_precondition(tool: Tool, error: str) -> Precondition | None:
    return next((p for p in tool.preconditions if p.error == error), None)


def _write(m: Minter, spec: TaskSpec, key: Any, variant: int) -> Instance | None:
    address = m.address(spec, key)
    tool, table = m.world.tool(spec.tool("write")), key_table(m.world, spec.anchor)
    assert tool is not None
    read = _read_by(m, tool, table)
    needs = ({c.name for c in table.columns} if read is None else read) | {
        detail for _, (kind, detail) in spec.extras if kind == "row"}
    found = _looked_up(m, spec, key, address, "lookup", needs) if address is not None else None
    if address is None or found is None:
        return None
    steps, row_step, observations = found
    identified = 0 if address.checks else None
    filled = fill(spec.extras, observations[row_step], row_step, observations[0] if identified == 0 else None,
                  identified, m.seed_rows)
    if filled is None:
        return None
    chain_extras, literal_extras, stated = filled
    write_args = {**threaded_key(spec.params("write"), table, row_step), **chain_extras}
    refused = spec.template == "write_refused"
    said = _restatement(m, tool, table, steps[row_step].tool, observations[row_step], address.told)
    write = Step(tool=tool.name, arguments=write_args, expect_error=refused,
                 say=said if spec.template == "write_ok" else None)
    ran = m.run([*steps, write])
    if ran is None:
        return None
    action = tool.action or tool.name.replace("_", " ")
    details = "".join(f" ({words(m.world, None, name)}: {spoken(value)})" for name, value in stated
                      if "{" + name + "}" not in action)
    instruction = m.wording(spec, variant, address, action=acting(action, address.asked, stated), details=details)
    base = _access_checks(m, spec, key, address, steps, "lookup", then=None if refused else tool.name)
    written = {**key_arguments(spec, "write", table, key), **literal_extras}
    if refused:
        return _refusal(m, spec, key, address, steps + [write], ran, tool, instruction, base, stated, said)
    observations, _errors, changes = ran
    if not changes:
        return None
    answer = f"Done: {COMPLETED} to {acting(action, address.told, stated)}."
    turns: tuple[UserTurn, ...] = ()
    if spec.template == "write_confirmed":
        turns = (_confirmation(m, tool, resolve_arguments(write, observations[:-1]), len(steps), address, action,
                               stated, said),)
    verified, unchanged = state_checks(m.world, changes)
    listed = {"list_match": "multiset"} if any(isinstance(v, list) for v in written.values()) else {}
    checks = base + [check("tool_called", tool=tool.name, arguments=written, **listed)] + verified + [unchanged]
    if turns:
        checks.append(check("after_turn", tool=tool.name, turn=0))
    return m.instance(spec, key, make_task(spec, key, instruction, [*steps, write], answer, checks, turns))


def _confirmation(m: Minter, tool: Tool, arguments: dict[str, Any], after_step: int, address: Address,
                  action: str, stated: tuple[tuple[str, Any], ...], said: str | None = None) -> UserTurn:
    """The scripted confirmation before a ``confirm`` write: the agent names the row and the action and states
    what the tool's ``confirm`` declares (labels, money formats), the customer says yes."""
    lookup = seed_lookup(m.runtime)
    question = f"Shall I {acting(action, 'it', stated)} now?"
    details = [f"{label}: {value}" for label, value in labelled_states(m.world, tool, arguments, lookup)
               if not text_spans(question, value)]
    found = f"I found {address.told}" + (f" ({'; '.join(details)})" if details else "")
    return UserTurn(after_step=after_step, user=CONFIRMATION,
                    assistant=f"{said} {found}. {question}" if said else f"{found}. {question}",
                    confirms=confirmation_request(m.world, tool, arguments, lookup))


def _refusal(m: Minter, spec: TaskSpec, key: Any, address: Address, steps: list[Step], ran: Any, tool: Tool,
             instruction: str, base: list[dict[str, Any]], stated: tuple[tuple[str, Any], ...],
             said: str | None = None) -> Instance | None:
    """The write refused by a precondition, explained in the world's words. Under ``check_before_write`` the
    chain stops at the look-up and the verifier requires that the write was never called."""
    observations, _errors, changes = ran
    reason = observations[-1].get("error", "")
    failed = _failed_precondition(tool, reason)
    if reason in m.missing_row_errors(spec, "write") or changes or failed is None or failed.explanation is None:
        return None
    action = tool.action or tool.name.replace("_", " ")
    answer = sentence(f"I'm sorry, I can't {acting(action, address.told, stated)}: {failed.explanation}")
    answer = f"{said} {answer}" if said else answer
    others = tuple(sorted({p.explanation for t in m.world.tools for p in t.preconditions if p.explanation}
                          - {failed.explanation} | {COMPLETED}))
    checks = base + [answer_check(failed.explanation, others=others), check("unchanged_except")]
    if m.world.procedures.check_before_write:
        steps = steps[:-1]
        checks.append(check("tool_not_called", tool=tool.name,
                            arguments=key_arguments(spec, "write", key_table(m.world, spec.anchor), key)))
    return m.instance(spec, key, make_task(spec, key, instruction, steps, answer, checks))


def _counted_rows(tool: Tool, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The listed rows a customer would count (the tool's ``counts_exclude`` left out)."""
    rule = tool.counts_exclude
    if rule is None:
        return rows
    return [row for row in rows if row.get(rule.column) not in rule.values]


def _aggregate(m: Minter, spec: TaskSpec, key: Any, variant: int) -> Instance | None:
    address = m.address(spec, key)
    if address is None:
        return None
    lister, table = spec.tool("list"), key_table(m.world, spec.anchor)
    steps = [*address.steps, Step(tool=lister, arguments=address.key_arguments(spec.params("list"), table, key))]
    ran = m.run(steps)
    tool = m.world.tool(lister)
    assert tool is not None
    if ran is None or not isinstance(ran[0][-1], list):
        return None
    rows = _counted_rows(tool, ran[0][-1])
    if not rows:
        return None
    noun = tool.result_noun or "records"
    leaves_out = f", {tool.counts_exclude.wording}" if tool.counts_exclude else ""
    told = address.told[0].upper() + address.told[1:]
    column: str | None = None
    if spec.template == "aggregate_count":
        value: Any = len(rows)
        declared = None
        answer = f"{told} has {counted(value, noun)}{leaves_out}."
        instruction = m.wording(spec, variant, address, noun=noun)
    else:
        column = _numeric_column(m.world, rows)
        if column is None:
            return None
        declared = declared_column(m.world, None, column)
        value = sum((Decimal(str(row[column])) for row in rows), Decimal(0))
        field = words(m.world, None, column)
        answer = f"Across the {noun} of {address.told}{leaves_out}, the {field} adds up to {quoted(value, declared)}."
        instruction = m.wording(spec, variant, address, noun=noun, field=field)
    calculation = _calculation(m, lister, rows, column)
    if calculation is not None:
        steps.append(calculation)
        calculated = m.run(steps)
        if calculated is None or Decimal(calculated[0][-1]["result"]) != value:
            return None
    checks = address.ordered(lister) + [check("tool_called", tool=lister,
                                              arguments=key_arguments(spec, "list", table, key)),
                                        answer_check(value, column=declared if spec.template == "aggregate_total"
                                                     else None), check("unchanged_except")]
    return m.instance(spec, key, make_task(spec, key, instruction, steps, answer, checks))


def _calculation(m: Minter, lister: str, rows: list[dict[str, Any]], column: str | None) -> Step | None:
    """The call of the world's ``calculate`` built-in that works an aggregate out, or None: a total adds the
    listed ``column`` values as the rows show them (``"12.5 + 30 + 7.25"``); a count adds one term per counted
    row, the row's own key over itself (``"233/233 + 234/234"``, each 1), so every term is copied from a row the
    list showed. None without a calculator, and for a count whose rows show no key column of distinct positive
    integers (a ``1`` per row, ``"1 + 1"``, is a count made in the head again: measured worse than none). The
    answer quotes the calculator's result; the verifier does not require the call (an agent may add without it)."""
    calculator = next((tool for tool in m.world.tools if tool.builtin == "calculate"), None)
    if calculator is None:
        return None
    if column is not None:
        terms = [str(row[column]) for row in rows]
    else:
        key = _row_key_column(m, lister, rows)
        if key is None:
            return None
        terms = [f"{row[key]}/{row[key]}" for row in rows]
    return Step(tool=calculator.name, arguments={"expression": " + ".join(terms)})


def _row_key_column(m: Minter, lister: str, rows: list[dict[str, Any]]) -> str | None:
    """The first result column of ``lister`` that holds a primary-key column (read from its SQL; one column of a
    composite key too, such as a leg's position) and shows a distinct positive integer in every one of ``rows``;
    None when there is none."""
    keys = {f"{t.name}.{column}" for t in m.world.state.tables for column in t.key_columns}
    for column, sources in m.result_sources(lister).items():
        values = [row.get(column) for row in rows]
        if sources & keys and all(type(v) is int and v > 0 for v in values) and len(set(values)) == len(values):
            return column
    return None


def _numeric_column(world: Any, rows: list[dict[str, Any]]) -> str | None:
    """The first numeric column of the listed rows that is a quantity, not a key: never a column some table
    declares as (part of) a primary key or as a reference, nor one named id or ending in _id."""
    keys = {c.name for t in world.state.tables for c in t.columns if c.primary_key or c.references}
    for column, value in rows[0].items():
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        is_key = column in keys or column == "id" or column.endswith("_id")
        if numeric and not is_key and all(isinstance(row.get(column), int | float) for row in rows):
            return column
    return None


BUILDERS: dict[str, Builder] = {
    "lookup_field": _lookup_field,
    "find_then_read": _find_then_read,
    "write_ok": _write,
    "write_refused": _write,
    "write_confirmed": _write,
    "aggregate_count": _aggregate,
    "aggregate_total": _aggregate,
    "handoff": handoff,
}
"""Each template's builder."""
