"""How a minted case reaches its anchor row the way a customer would.

A customer names what they know: their email (the world's declared identification step, :mod:`world_format.
procedures`), an order number (a key the world does not mark ``internal_key``), a product's SKU (a natural key,
found with the tool that looks rows up by it). An :class:`Address` is what minting puts before a template's own
steps — the identification call when the row belongs to a customer, a find-by-natural-key call when the row's
key is internal — with the row in the customer's words and in the agent's, and the checks those steps need.

A world without procedures and without internal keys gets an empty address: the row named by its key, as before.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from world_format.entities import Entities, owning_reference
from world_format.models import Anchor, ArgRef, Step, Table, Tool, World
from world_format.procedures import Identification, identification, identifications
from world_format.runtime import WorldRuntime
from world_format.state import quote_identifier

INTROS = ("Hi, this is {value}.", "My {column} is {value}.", "{value} here.")
"""How a customer opens by identifying themselves (seeded per case)."""


def threaded(step: int, column: str) -> ArgRef:
    """An argument read from step ``step``'s observation (its ``column``)."""
    return ArgRef.model_validate({"$from": step, "pointer": f"/{column}"})


def threaded_key(params: tuple[str, ...], table: Table, step: int) -> dict[str, Any]:
    """The arguments naming a row of ``table`` (one per key column), read from step ``step``'s observation."""
    return {param: threaded(step, column) for param, column in zip(params, table.key_columns, strict=True)}


def _check(kind: str, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, **fields}


@dataclass(frozen=True)
class Address:
    """The steps and words that reach one anchor row as a customer would."""

    steps: tuple[Step, ...]
    """Calls before the template's own: the identification, then a find by natural key (either may be absent)."""
    key_source: int | None
    """The step whose observation carries the row's key columns (threaded into later calls); None: the key is
    one the customer states, passed literally."""
    asked: str
    """The row in the customer's words: "my order 50123", "my account", "the product with SKU TO-1"."""
    told: str
    """The row in the agent's words: "your order 50123", "your account", "the product with SKU TO-1"."""
    intro: str = ""
    """The customer's opening ("Hi, this is ana@example.com. "), empty when no identification is needed."""
    checks: tuple[dict[str, Any], ...] = ()
    """Verifier checks for the identification: it was called with the customer's key, before anything else."""
    is_customer: bool = False
    """Whether the row is the identified customer's own row (the identification observation is the row)."""

    def key_arguments(self, params: tuple[str, ...], table: Table, key: Any) -> dict[str, Any]:
        """The arguments naming the row in a template call: threaded from :attr:`key_source`, or literal."""
        if self.key_source is not None:
            return threaded_key(params, table, self.key_source)
        if not table.composite:
            return {params[0]: key}
        return {param: key[column] for param, column in zip(params, table.key_columns, strict=True)}

    def ordered(self, first_own_tool: str | None) -> list[dict[str, Any]]:
        """The identification checks, plus an order check putting it before ``first_own_tool`` (when given)."""
        checks = list(self.checks)
        if checks and first_own_tool is not None and self.steps and first_own_tool != self.steps[0].tool:
            checks.append(_check("order", tools=[self.steps[0].tool, first_own_tool]))
        return checks


def name_of(anchor: Anchor, table: Table, key: Any) -> str:
    """A row's name from its key: the anchor's ``named_as`` filled in, else its label and key ("order 50123")."""
    values = key if table.composite else {table.key_columns[0]: key}
    if anchor.named_as is not None:
        return anchor.named_as.format(**{column: values[column] for column in table.key_columns})
    if not table.composite:
        return f"{anchor.label} {key}"
    columns = {c.name: c for c in table.columns}
    return f"{anchor.label} " + ", ".join(f"{columns[c].words} {values[c]}" for c in table.key_columns)


def natural_finder(world: World, table: str, column: str) -> Tool | None:
    """A read tool returning one row of ``table`` by its natural key ``column`` (its one required parameter)."""
    for tool in world.tools:
        required = tool.parameters.get("required", [])
        if (tool.effect == "read" and tool.result.shape == "row" and isinstance(required, list) and len(required) == 1
                and tool.anchors.get(str(required[0])) == f"{table}.{column}"):
            return tool
    return None


class Addresser:
    """Addresses of anchor rows in one world (entity roots and natural-key values read from the seed)."""

    def __init__(self, world: World, entities: Entities, runtime: WorldRuntime, seed: int) -> None:
        self.world = world
        self.entities = entities
        self.runtime = runtime
        self.seed = seed
        self.identification: Identification | None = identification(world)
        self.identifications = identifications(world)

    def _identified_by(self, salt: str) -> Identification:
        """The identification a case's customer gives (seeded per case among the declared ones)."""
        found = self.identifications
        return found[random.Random(f"{self.seed}:identify:{salt}").randrange(len(found))] if len(found) > 1 \
            else found[0]

    def _value(self, table: Table, key: Any, column: str) -> Any:
        where = " AND ".join(f"{quote_identifier(c)} = ?" for c in table.key_columns)
        params = tuple(key[c] for c in table.key_columns) if table.composite else (key,)
        with self.runtime.guard.host() as conn:
            row = conn.execute(f"SELECT {quote_identifier(column)} FROM {quote_identifier(table.name)} "
                               f"WHERE {where}", params).fetchone()
        return None if row is None else row[0]

    def _intro(self, table: Table, salt: str, values: dict[str, Any]) -> str:
        """The customer's opening, giving the natural keys they identify by (one value, or "My name is Ana Lee and
        my zip code is 94110." for several)."""
        words = {c.name: c.words for c in table.columns}
        if len(values) > 1:
            given = " and ".join(f"my {words[column]} is {value}" for column, value in values.items())
            return given[0].upper() + given[1:] + ". "
        [(column, value)] = values.items()
        text = INTROS[random.Random(f"{self.seed}:intro:{salt}").randrange(len(INTROS))]
        return text.format(value=value, column=words[column]) + " "

    def _owned_table(self, name: str) -> bool:
        """Whether the rows of table ``name`` belong to a customer (its owning references lead to the identity
        table)."""
        seen: set[str] = set()
        while name not in seen:
            if self.identification is not None and name == self.identification.table:
                return True
            seen.add(name)
            table = self.world.state.table(name)
            owner = owning_reference(table) if table is not None else None
            if owner is None or owner.references is None:
                return False
            name = owner.references.split(".")[0]
        return False

    def address(self, table_name: str, key: Any, salt: str) -> Address | None:
        """How a customer reaches row ``key`` of anchor table ``table_name``; None when no customer could name it
        (an internal key with no natural key to find the row by, or a null natural key)."""
        anchor, table = self.world.state.anchor(table_name), self.world.state.table(table_name)
        assert anchor is not None and table is not None
        steps: list[Step] = []
        intro, checks, own = "", tuple[dict[str, Any], ...](), False
        ident = self.identification
        if ident is not None:
            root_table, root_key = self.entities.root(table_name, key)
            if root_table != ident.table and self._owned_table(table_name):
                return None  # a row of a customer-owned table that belongs to no customer: nobody can ask for it
            if root_table == ident.table:
                root = self.world.state.table(root_table)
                assert root is not None
                ident = self._identified_by(salt)
                values = {column: self._value(root, root_key, column) for column in ident.columns}
                if any(value is None for value in values.values()):
                    return None
                arguments = ident.arguments(values)
                steps.append(Step(tool=ident.tool, arguments=arguments))
                intro = self._intro(root, salt, values)
                checks = (_check("tool_called", tool=ident.tool, arguments=arguments),)
                own = True
                if table_name == ident.table:
                    return Address(tuple(steps), 0, "my account", "your account", intro, checks, is_customer=True)
        mine, yours = ("my ", "your ") if own else ("", "")
        if not anchor.internal_key:
            name = name_of(anchor, table, key)
            return Address(tuple(steps), None, mine + name, yours + name, intro, checks)
        for column in anchor.natural_keys:
            finder = natural_finder(self.world, table_name, column)
            value = self._value(table, key, column)
            if finder is None or value is None:
                continue
            required = finder.parameters["required"][0]
            words = next(c.words for c in table.columns if c.name == column)
            steps.append(Step(tool=finder.name, arguments={required: value}))
            name = f"{anchor.label} with {words} {value}"
            return Address(tuple(steps), len(steps) - 1, f"{mine or 'the '}{name}", f"{yours or 'the '}{name}",
                           intro, checks)
        return None
