"""Strict, frozen pydantic models of the world format.

Every field carries a docstring: with ``use_attribute_docstrings`` they become the
descriptions in ``spec/world.schema.json``. Unknown fields are an error, never dropped.

This is why this file is long: it is the whole world format, one small model per concept, read top to
bottom in the order of a world document (identity, state, tools, VCode, tasks, world); splitting
it would scatter one schema over modules that import each other.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from typing_extensions import TypeAliasType

FORMAT_VERSION = "1"

Slug = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{1,62}$")]
Identifier = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")]
Scalar = str | int | float | bool | None
if TYPE_CHECKING:
    ScalarValue = Scalar
else:  # its own alias, so a left-to-right union around it keeps true a bool and 1.5 a float (smart mode inside)
    ScalarValue = TypeAliasType("ScalarValue", Annotated[str | int | float | bool | None, Field(union_mode="smart")])
JsonValue = Any


class StrictModel(BaseModel):
    """Base for every format model: frozen, unknown fields forbidden, docstrings as descriptions."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        use_attribute_docstrings=True,
        strict=False,
        populate_by_name=False,
    )


# --------------------------------------------------------------------------- identity


class Identity(StrictModel):
    """Who the company is."""

    id: Slug
    """Stable slug of the world (lowercase letters, digits and dashes), used in kit names."""
    name: str = Field(min_length=1, max_length=200)
    """Human name of the company or service."""
    domain: str = Field(min_length=1, max_length=200)
    """Business domain, e.g. "retail support" or "IT helpdesk"."""
    description: str = Field(min_length=1, max_length=4000)
    """One paragraph on what the service does and who the agent serves."""


# --------------------------------------------------------------------------- state


class Column(StrictModel):
    """One column of a seed table."""

    name: Identifier
    """Column name."""
    type: Literal["INTEGER", "REAL", "TEXT", "BLOB"]
    """SQLite storage type of the column (tables are created STRICT)."""
    primary_key: bool = False
    """Whether this column is (part of) the table's primary key; several key columns make a composite key."""
    not_null: bool = False
    """Whether NULL is refused."""
    unique: bool = False
    """Whether values must be unique."""
    references: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")
    """Foreign key target as "table.column" (the parent's primary key or a unique column), or null."""
    default: str | int | float | bool | None = None
    """The value a row gets when an insert leaves the column out (null: no default)."""
    json_data: bool = False
    """TEXT columns holding JSON (checked valid on load; observations show it as nested JSON, VCode can address
    into it with a json_value check)."""
    decimals: int | None = Field(default=None, ge=0, le=12)
    """REAL columns of fixed-point amounts (money): the decimal places they are quoted at. Minted answers and
    checks about the column round to it, with ``rounding``; null means reals compare exactly as stored."""
    rounding: Literal["half_even", "half_up"] = "half_even"
    """How amounts of this column round to ``decimals`` places (banker's rounding, or half away from zero)."""
    label: str | None = Field(default=None, min_length=1, max_length=60)
    """How minted wording names the column, e.g. "join date" for joined_on (null: the name with spaces)."""
    currency: str | None = Field(default=None, min_length=1, max_length=8)
    """Money columns: the symbol minted wording writes before an amount, e.g. "$" (with ``decimals`` places)."""
    minor_units: bool = False
    """Money columns stored in the currency's minor unit (cents): wording quotes them divided by 10**decimals."""

    @property
    def words(self) -> str:
        """The column as minted wording names it (its ``label``, else its name with spaces)."""
        return self.label or self.name.replace("_", " ")


class Table(StrictModel):
    """A table of the starting state."""

    name: Identifier
    """Table name."""
    columns: tuple[Column, ...] = Field(min_length=1, max_length=64)
    """Columns in storage order; at least one is (part of) the primary key."""
    checks: tuple[str, ...] = Field(default=(), max_length=16)
    """CHECK constraints: SQL expressions over a row's columns that every row must satisfy (a write that breaks
    one is refused), e.g. "seats_left >= 0"."""
    owner: Identifier | None = None
    """The column whose reference owns this table's rows: a row belongs to the entity of the row it names (a loan to
    its patron, not to the copy it lends). Required when the table references more than one other table; null
    with one such reference, that one."""

    @model_validator(mode="after")
    def _has_a_primary_key(self) -> Table:
        if not any(column.primary_key for column in self.columns):
            raise ValueError(f"table {self.name!r} must mark at least one column primary_key")
        names = [column.name for column in self.columns]
        if len(set(names)) != len(names):
            raise ValueError(f"table {self.name!r} declares a column twice")
        return self

    @property
    def key_columns(self) -> tuple[str, ...]:
        """The primary-key columns, in declaration order (one, or several for a composite key)."""
        return tuple(column.name for column in self.columns if column.primary_key)

    @property
    def composite(self) -> bool:
        """Whether the primary key spans several columns (its rows are keyed by objects)."""
        return len(self.key_columns) > 1

    @property
    def primary_key(self) -> str:
        """Name of the single primary-key column (ValueError for a composite key: use key_columns)."""
        if self.composite:
            raise ValueError(f"table {self.name!r} has a composite key {list(self.key_columns)}")
        return self.key_columns[0]


class DeclaredSql(StrictModel):
    """A view or trigger that the world declares on purpose (anything undeclared is refused)."""

    name: Identifier
    """Name of the view or trigger."""
    sql: str = Field(min_length=1, max_length=20000)
    """Its CREATE statement, exactly as stored in sqlite_schema."""


class Index(StrictModel):
    """An index the seed holds (for lookups by a non-key column, or to make a column set unique)."""

    name: Identifier
    """Name of the index."""
    table: Identifier
    """The indexed table."""
    columns: tuple[Identifier, ...] = Field(min_length=1, max_length=16)
    """Indexed columns, in order."""
    unique: bool = False
    """Whether the indexed values must be unique (rows that repeat them are refused)."""


class Anchor(StrictModel):
    """An anchor table: the entities tasks are about (customers, orders, tickets...)."""

    table: Identifier
    """Name of the anchor table."""
    label: str = Field(min_length=1, max_length=60)
    """Singular noun used in task wording, e.g. "order"."""
    natural_keys: tuple[Identifier, ...] = ()
    """Columns a person would identify a row by (name, email), besides the primary key."""
    answer_fields: tuple[Identifier, ...] = ()
    """Columns that make good questions ("what is the status of order 7?")."""
    named_as: str | None = Field(default=None, min_length=1, max_length=120)
    """How minted wording names one row, with {column} slots filled from the row's key columns, e.g. "leg
    {position} of booking {booking_id}" (null: the label and the key, "order 50123")."""
    internal_key: bool = False
    """Whether the primary key is a database id the customer never sees (a customer id, a product id): minted
    wording then names a row by a natural key (or, for the identified customer, as "my account"), never by the
    key, and the wording lint flags the key in a customer's turn. Leave false for a key a customer knows (an
    order number, a booking reference)."""


class State(StrictModel):
    """The starting state: table declarations plus the seed rows (inline) or a seed file."""

    tables: tuple[Table, ...] = Field(min_length=1, max_length=64)
    """Every table of the seed database, in creation order."""
    anchors: tuple[Anchor, ...] = Field(min_length=1)
    """Tables whose rows tasks may target."""
    indexes: tuple[Index, ...] = ()
    """Indexes the seed holds; any other index is refused (a unique index changes what tools may write)."""
    views: tuple[DeclaredSql, ...] = ()
    """Views the seed may contain; any other view is refused."""
    triggers: tuple[DeclaredSql, ...] = ()
    """Triggers the seed may contain; any other trigger is refused."""
    rows: dict[Identifier, list[list[Scalar]]] | None = None
    """Single-file form only: seed rows per table, each row a list in column order."""
    seed: Literal["seed.sqlite"] | None = None
    """Packaged form only: the seed database file beside world.json."""

    @model_validator(mode="after")
    def _rows_or_seed(self) -> State:
        if (self.rows is None) == (self.seed is None):
            raise ValueError('state needs exactly one of "rows" (single-file export) or "seed" (packaged world)')
        return self

    def table(self, name: str) -> Table | None:
        """The declared table called ``name``, if any."""
        return next((table for table in self.tables if table.name == name), None)

    def anchor(self, name: str) -> Anchor | None:
        """The anchor declared on table ``name``, if any."""
        return next((anchor for anchor in self.anchors if anchor.table == name), None)


# --------------------------------------------------------------------------- tools


class Precondition(StrictModel):
    """A query that must hold before a tool's statements run."""

    sql: str = Field(min_length=1, max_length=20000)
    """A single SELECT whose first column of the first row must be truthy (no row counts as false)."""
    error: str = Field(min_length=1, max_length=500)
    """The message returned to the model when the precondition does not hold."""
    explanation: str | None = Field(default=None, min_length=1, max_length=500)
    """What the agent tells the customer when the precondition does not hold, in its own words, e.g. "it has
    already shipped" (minted refusals say it, never the tool's error; without one, no refusal of this
    precondition is minted)."""


class ToolResult(StrictModel):
    """How a tool's observation is shaped."""

    shape: Literal["rows", "row", "affected", "recorded"]
    """rows: every row of the last statement; row: exactly one row; affected: rows changed by the writes;
    recorded: a pure tool's call is recorded and answered {"status": "recorded"} (with ``message`` when set)."""
    message: str | None = Field(default=None, max_length=500)
    """recorded: what the tool tells the agent, e.g. "A human agent will take over this conversation."."""
    json_fields: tuple[Identifier, ...] = ()
    """Result columns holding JSON text to render as nested JSON (columns declared ``json_data`` are, by name)."""
    not_found: str = Field(default="no matching record", min_length=1, max_length=500)
    """Message returned when shape is "row" and the last statement yields no row."""
    max_rows: int = Field(default=50, ge=1, le=1000)
    """Cap on the rows returned when shape is "rows"."""


class Exclusion(StrictModel):
    """Listed rows that minted counts and sums leave out, and how the answer says so."""

    column: Identifier
    """A column of the tool's result rows."""
    values: tuple[Scalar, ...] = Field(min_length=1, max_length=20)
    """Rows whose column holds one of these values are not counted."""
    wording: str = Field(min_length=1, max_length=120)
    """How a minted answer says what it leaves out, e.g. "not counting cancelled orders"."""


class Confirmation(StrictModel):
    """What the agent's question before a write the customer must confirm states, besides naming the action and
    the row (spec/world-format.md, *Confirmations*)."""

    states: tuple[str, ...] | None = None
    """Each a parameter of the write (its value as the customer reads it: each element of a list, money with its
    symbol at its places) or "table.column" of the row the write's key arguments name (its value before the write,
    quoted by the column's label and money format, e.g. "orders.total"). Null: every parameter of the write."""


class Tool(StrictModel):
    """A tool the agent may call, implemented declaratively in SQL."""

    name: Identifier
    """Function name the model calls."""
    description: str = Field(min_length=1, max_length=2000)
    """What the tool does, shown to the model."""
    effect: Literal["read", "write", "none"]
    """read tools may not change the state (enforced by the SQLite authorizer); none: a pure tool (a hand-off, a
    note) whose arguments are validated and recorded in the trace, with no SQL at all."""
    parameters: dict[str, JsonValue]
    """JSON Schema (object) of the arguments; properties are scalars bound to SQL parameters by name."""
    statements: tuple[str, ...] = Field(default=(), max_length=8)
    """SQL statements run in order with named parameters (:name) bound from the validated arguments (at least one
    for read and write tools, none for a pure tool)."""
    preconditions: tuple[Precondition, ...] = ()
    """Checks evaluated before the statements; the first that fails returns its error."""
    result: ToolResult
    """Shape of the observation."""
    anchors: dict[Identifier, str] = Field(default_factory=dict)
    """Which anchor column each parameter identifies, as "table.column" (used by task minting)."""
    confirm: bool | Confirmation = False
    """Write tools: policy asks for the customer's explicit confirmation before the call (minted chains ask and
    wait for the "yes"; their verifiers require the write to come after it). true, or what the question states
    (a Confirmation; true: every parameter of the write)."""
    result_noun: str | None = Field(default=None, max_length=60)
    """Plural noun for what a rows-shaped result lists, e.g. "orders" (used in minted wording)."""
    action: str | None = Field(default=None, max_length=60)
    """Verb phrase for a write tool in minted wording, e.g. "cancel" (the row follows it), or with a {row} slot
    where the row goes ("upgrade {row} to express shipping") and {parameter} slots for values the customer
    states ("set the priority of {row} to {priority}")."""
    counts_exclude: Exclusion | None = None
    """Rows-shaped tools: listed rows that minted counts and sums leave out, as a customer would (cancelled
    orders are not "my orders")."""
    builtin: Literal["calculate"] | None = None
    """Pure tools: a built-in that answers the call instead of recording it. calculate: the string parameter
    ``expression`` (numbers, + - * / and parentheses) evaluated with exact decimals, answered {"result": "1142.51"}
    (world_format/arithmetic.py; nothing is executed as code, anything else is a tool error)."""

    @model_validator(mode="after")
    def _pure_or_sql(self) -> Tool:
        pure = self.effect == "none"
        if self.builtin is not None and not pure:
            raise ValueError(f"tool {self.name!r}: a builtin is a pure tool (effect none)")
        if pure and (self.statements or self.preconditions or self.result.shape != "recorded"):
            raise ValueError(f"tool {self.name!r} is pure (effect none): it has no statements or preconditions and "
                             'its result shape is "recorded"')
        if not pure and (not self.statements or self.result.shape == "recorded"):
            raise ValueError(f"tool {self.name!r} runs SQL: give it statements and a rows, row or affected result")
        return self

    def function_spec(self) -> dict[str, Any]:
        """The tool as an OpenAI/Hugging Face function spec (what the model sees)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


# --------------------------------------------------------------------------- values and VCode


class Ref(StrictModel):
    """A value taken from somewhere else at run time."""

    ref: str = Field(alias="$ref", pattern=r"^(answer_key|capture\.[A-Za-z_][A-Za-z0-9_]*)$")
    """"answer_key" for the task's answer key, or "capture.NAME" for a value captured by the verifier."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True, populate_by_name=False)


ValueOrRef = Ref | Scalar
if TYPE_CHECKING:  # mypy cannot follow a recursive TypeAliasType
    CheckValue = Any
else:
    CheckValue = TypeAliasType("CheckValue", Annotated[Ref | ScalarValue | list["CheckValue"] | dict[str, "CheckValue"],
                                                       Field(union_mode="left_to_right")])
"""An argument value a verifier expects: a value, a reference, or a list or object of them."""


class Capture(StrictModel):
    """A value the verifier reads out of the agent's trace."""

    name: Identifier
    """Name under which the value is available as {"$ref": "capture.NAME"}."""
    tool: Identifier
    """The tool whose successful observation is read."""
    pointer: str = Field(pattern=r"^(/[^/]*)*$")
    """JSON pointer into that observation, e.g. "/id"."""
    occurrence: Literal["first", "last"] = "last"
    """Which successful call of the tool to read."""


class SqlCheck(StrictModel):
    """A read-only query over the final state whose rows must equal the expected rows."""

    kind: Literal["sql"]
    """Discriminator."""
    query: str = Field(min_length=1, max_length=20000)
    """A single SELECT with named parameters."""
    params: dict[Identifier, ValueOrRef] = Field(default_factory=dict)
    """Values bound to the query's named parameters."""
    expect: list[list[ValueOrRef]]
    """Expected rows, in order, each a list of column values. Integers compare exactly; reals as the decimal
    they spell, or rounded to ``decimals`` places when set."""
    decimals: int | None = Field(default=None, ge=0, le=12)
    """Round real values (found and expected) to this many places before comparing (for sums of amounts)."""
    rounding: Literal["half_even", "half_up"] = "half_even"
    """The rounding rule for ``decimals``."""


class AnswerCheck(StrictModel):
    """A check on the agent's final answer."""

    kind: Literal["answer"]
    """Discriminator."""
    mode: Literal["exact", "normalized", "contains", "regex", "number", "json_field"]
    """exact: the trimmed answer is the value; normalized: equal after case, spacing and punctuation are
    normalized; contains: the value occurs as whole tokens and, when ``field`` is set, no other value of that
    field does; regex: the pattern matches somewhere; number: the answer states the value and no other
    number except integers the agent used as tool arguments; json_field: a JSON answer's field (``pointer``)
    equals the value. spec/world-format.md gives each mode's exact rule."""
    value: ValueOrRef
    """The expected value (or the pattern, for regex)."""
    pointer: str | None = Field(default=None, pattern=r"^(/[^/]*)*$")
    """JSON pointer into the answer, for json_field."""
    field: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")
    """contains: "table.column" the value belongs to. An answer that also states another value of the column
    (as the starting state holds it) is hedging and fails."""
    others: tuple[str, ...] = ()
    """contains: other values of the same kind (say, the other refusal reasons) that a committed answer must
    not also state."""
    decimals: int | None = Field(default=None, ge=0, le=12)
    """number: compare the stated number and the value rounded to this many places."""
    rounding: Literal["half_even", "half_up"] = "half_even"
    """number: the rounding rule for ``decimals``."""


class ToolCalledCheck(StrictModel):
    """The trace contains a successful call of a tool whose arguments include these values."""

    kind: Literal["tool_called"]
    """Discriminator."""
    tool: Identifier
    """Tool name."""
    arguments: dict[Identifier, CheckValue] = Field(default_factory=dict)
    """Arguments that must match (others may be anything); lists compare as ``list_match`` says."""
    list_match: Literal["ordered", "multiset"] = "ordered"
    """ordered: a list argument must hold the same elements in the same order; multiset: the same elements as many
    times each, in any order (a return of items ["a", "a", "b"] is ["b", "a", "a"])."""
    allow_error: bool = False
    """Whether a call that returned a tool error also counts."""


class ToolNotCalledCheck(StrictModel):
    """No call of a tool (optionally: with these arguments) appears in the trace."""

    kind: Literal["tool_not_called"]
    """Discriminator."""
    tool: Identifier
    """Tool name."""
    arguments: dict[Identifier, CheckValue] = Field(default_factory=dict)
    """Only calls whose arguments include these values count; empty means any call."""
    list_match: Literal["ordered", "multiset"] = "ordered"
    """How list arguments compare (see tool_called)."""


class OrderCheck(StrictModel):
    """Successful calls of these tools appear in this order (other calls may interleave)."""

    kind: Literal["order"]
    """Discriminator."""
    tools: tuple[Identifier, ...] = Field(min_length=2)
    """Tool names in the required order."""


class AfterTurnCheck(StrictModel):
    """Every successful call of a tool comes after the customer's scripted turn ``turn`` (e.g. the "yes" that
    confirms a write); passes when the tool was not called at all (pair it with tool_called)."""

    kind: Literal["after_turn"]
    """Discriminator."""
    tool: Identifier
    """Tool name."""
    turn: int = Field(ge=0)
    """Index of the task's scripted user turn (0-based) the calls must follow."""


class JsonValueCheck(StrictModel):
    """A value inside a JSON column of one row of the final state equals the expected value."""

    kind: Literal["json_value"]
    """Discriminator."""
    table: Identifier
    """Table name."""
    key: ValueOrRef | dict[Identifier, ValueOrRef]
    """The row's key (an object for a composite key)."""
    column: Identifier
    """A column declared json_data."""
    pointer: str = Field(pattern=r"^(/[^/]*)*$")
    """JSON pointer into the column's value, e.g. "/seat"."""
    value: CheckValue
    """The expected value (compared exactly and by type)."""


class RowKey(StrictModel):
    """A row identified by table and primary key."""

    table: Identifier
    """Table name."""
    key: ValueOrRef | dict[Identifier, ValueOrRef]
    """Primary-key value; for a composite key, an object with every key column, e.g.
    {"order_id": 5123, "position": 0}."""


class UnchangedExceptCheck(StrictModel):
    """Nothing changed between the starting and final state outside these rows."""

    kind: Literal["unchanged_except"]
    """Discriminator."""
    rows: tuple[RowKey, ...] = ()
    """Rows that may have been updated, inserted or deleted."""
    inserts: dict[Identifier, int] = Field(default_factory=dict)
    """Tables where new rows may appear, with the most new rows allowed."""


Check = Annotated[
    SqlCheck | AnswerCheck | ToolCalledCheck | ToolNotCalledCheck | OrderCheck | UnchangedExceptCheck
    | AfterTurnCheck | JsonValueCheck,
    Field(discriminator="kind"),
]


class VCode(StrictModel):
    """A verifier program: every check must pass. Evaluated by blobkit's own interpreter."""

    captures: tuple[Capture, ...] = ()
    """Values read from the trace before the checks run; a missing capture fails the verdict."""
    checks: tuple[Check, ...] = Field(min_length=1)
    """Checks; the verdict is pass when all pass, fail when one fails, error when one cannot run."""


# --------------------------------------------------------------------------- tasks


class ArgRef(StrictModel):
    """An argument taken from an earlier step's observation."""

    from_step: int = Field(alias="$from", ge=0)
    """Index of the earlier step in the reference chain."""
    pointer: str = Field(pattern=r"^(/[^/]*)*$")
    """JSON pointer into that step's observation."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True, populate_by_name=False)


if TYPE_CHECKING:
    ArgValue = Any
else:
    ArgValue = TypeAliasType("ArgValue", Annotated[ArgRef | ScalarValue | list["ArgValue"] | dict[str, "ArgValue"],
                                                   Field(union_mode="left_to_right")])
"""A reference argument: a literal, a value threaded from an earlier step, or a list or object of them."""


class ConfirmedWrite(StrictModel):
    """The write a scripted "yes" agrees to, and what the agent's question must state for the customer to give it."""

    tool: Identifier
    """The write tool (one the world declares with ``confirm``)."""
    states: tuple[str, ...] = Field(default=(), max_length=256)
    """Texts the question must state, as the world quotes them: the row's key, the write's arguments, looked-up
    values ("KXTRAB", "$1234.00"); a number is stated when the question states the same number."""


class UserTurn(StrictModel):
    """A scripted turn of the customer, in the middle of a task: the agent asks, the customer replies."""

    after_step: int = Field(ge=0)
    """How many reference steps the agent has made when it asks (the turn comes before step ``after_step``)."""
    assistant: str = Field(min_length=1, max_length=2000)
    """What the agent says to ask (a reference conversation's words; an agent may word it its own way)."""
    user: str = Field(min_length=1, max_length=2000)
    """The customer's reply, fed to the agent when it ends a turn without a tool call."""
    confirms: ConfirmedWrite | None = None
    """The write this reply agrees to: the customer gives ``user`` only to a turn that asks to confirm it (names its
    action and states every text of ``states``), and the world's ``unclear_reply`` to any other turn. Minted
    confirmations carry it; the builder fills it in for an authored turn before a ``confirm`` write."""


class Step(StrictModel):
    """One tool call of a reference chain."""

    tool: Identifier
    """Tool name."""
    arguments: dict[Identifier, ArgValue] = Field(default_factory=dict)
    """Literal arguments, or {"$from": step, "pointer": "/id"} threaded from an earlier observation."""
    expect_error: bool = False
    """Whether this call is expected to return a tool error (e.g. a refused write)."""
    say: str | None = Field(default=None, min_length=1, max_length=500, pattern=r"^[^<\n]+$")
    """What the agent says in the same turn, before this call: one line without "<", e.g. restating the
    looked-up value the call depends on ("Leg 2 of booking VYKYYB has status confirmed."). Replayed rows carry it
    as the assistant message's content beside its tool call; VCode does not read it, the declared procedures check
    it as they check anything the agent says (it must not name another customer)."""


class Family(StrictModel):
    """Makes an authored task a family of cases: one per row of a query over the starting state."""

    query: str = Field(min_length=1, max_length=20000)
    """A single SELECT over the starting state, without parameters. Each row it returns is one case:
    its columns fill the task's {{column}} slots. Rows whose filled-in reference chain does not pass
    the filled-in verifier are left out of the kit and counted."""


class Task(StrictModel):
    """A task with its reference chain and verifier."""

    instruction: str = Field(min_length=1, max_length=4000)
    """What the user asks, as the agent sees it."""
    anchor: RowKey
    """The anchor row the task is about."""
    reference: tuple[Step, ...] = Field(min_length=1, max_length=16)
    """The reference chain of tool calls that solves the task."""
    answer: str | None = Field(default=None, max_length=4000)
    """The answer key (a good final answer), or null when the reply is free text."""
    vcode: VCode
    """The verifier."""
    template: str = Field(default="authored", pattern=r"^[a-z_]{1,40}$")
    """How the task was made: "authored" for world tasks, else the minting template."""
    distractors: tuple[RowKey, ...] = ()
    """Anchor rows of the same shape used by the wrong-row probe (minted tasks fill this)."""
    family: Family | None = None
    """When set, the task is a template: a string that is exactly "{{name}}" becomes the value (and
    type) of column name of one query row, and "{{name}}" inside a longer string becomes its text."""
    turns: tuple[UserTurn, ...] = ()
    """Scripted customer turns in the middle of the task, in order (a multi-turn conversation): each is fed to
    the agent when it ends a turn without a tool call; the reply after the last one is the final answer."""


# --------------------------------------------------------------------------- world


def confirmation_policy(tool: Tool) -> str:
    """The policy line a ``confirm`` write tool adds to the system prompt (what its verifiers hold the agent to)."""
    action = tool.action or tool.name.replace("_", " ")
    return (f"Before calling {tool.name} ({action}), tell the customer exactly what will change and wait for their "
            "explicit yes; never call it in the same turn you ask.")


class Handoff(StrictModel):
    """When the desk hands the customer to a human: the requests it must not serve itself, the pure tool it calls
    then and what it says after. Minting makes hand-off cases from it: the customer, identified, asks for one of
    ``when``; the reference calls ``tool`` and answers ``message``; the verifier requires that call, that message
    and that nothing was written."""

    tool: Identifier
    """The pure tool (``"effect": "none"``, no ``builtin``) the agent calls to hand off, e.g.
    transfer_to_human_agents."""
    arguments: dict[Identifier, ScalarValue] = Field(default_factory=dict)
    """Arguments every hand-off call passes, checked by the verifier (``{"reason": "compensation"}``). A parameter
    anchored to an anchor table's key names the row the case is about; any other required string parameter (a
    summary) is given the customer's request in the agent's words."""
    when: tuple[str, ...] = Field(min_length=1, max_length=50)
    """The requests the desk must not serve, as the customer says them; ``{row}`` is the row the case is about
    ("I want compensation for the delay on {row}.")."""
    message: str = Field(min_length=1, max_length=500)
    """What the agent tells the customer after handing off, verbatim (the answer a hand-off case requires)."""

    @model_validator(mode="after")
    def _requests_differ(self) -> Handoff:
        if len(set(self.when)) != len(self.when):
            raise ValueError("handoff.when: a request is listed twice")
        if any(not text.strip() for text in self.when):
            raise ValueError("handoff.when: a request is empty")
        return self


def handoff_policy(rule: Handoff) -> str:
    """The policy line a hand-off rule adds to the system prompt: which requests go to a human, the call to make
    and the message to give (what hand-off cases' verifiers hold the agent to)."""
    given = ", ".join(f"{name}={json.dumps(value)}" for name, value in rule.arguments.items())
    asks = "; ".join(f'"{text.replace("{row}", "<row>")}"' for text in rule.when)
    return (f"Requests like these go to a human agent: {asks}. For them call {rule.tool}"
            + (f" with {given}" if given else "") + f", change nothing, and then tell the customer: {rule.message}")


class Procedures(StrictModel):
    """The procedures the policies state, in data the builder follows and checks: minted chains take these steps,
    verifiers require them, and the gate's policy-skip probes (a chain without the step) must fail. A write the
    customer must confirm is declared on the tool (``confirm``)."""

    identify: Identifier | tuple[Identifier, ...] | None = None
    """The read tool that verifies who the customer is (row-shaped, its required parameters anchored to natural
    keys of the identity table, e.g. find_customer_by_email), or several, any of which identifies them (by email,
    or by name and zip code: find_customer_by_name_zip with two parameters). Every call naming a row that belongs
    to a row of that table (following owning foreign keys: a customer's orders and their items) must come after a
    successful call of one of them that returned that row; minted chains start with one (seeded per case). Null:
    no identification."""
    check_before_write: bool = False
    """Whether a write is attempted only when its preconditions hold: where one does not, the agent reads the
    row, does not call the write, and explains in its own words (the precondition's ``explanation``)."""
    unclear_reply: str = Field(default="Sorry, I'm not sure what you are asking me to agree to. What exactly will "
                                       "you change?", min_length=1, max_length=500)
    """What the customer says to a turn that was to ask for their confirmation but does not (an empty turn, a
    statement, a question about another action or row): their "yes" waits for a question about the write."""

    handoff: Handoff | None = None
    """When the agent hands the customer to a human instead of serving them (:class:`Handoff`); it needs
    ``identify``. Null: no hand-off cases."""

    @property
    def declared(self) -> bool:
        """Whether any procedure is declared."""
        return bool(self.identify) or self.check_before_write


class World(StrictModel):
    """A company's service twin: identity, policies, starting state, tools and tasks."""

    format_version: Literal["1"]
    """Version of the world format."""
    identity: Identity
    """Company identity."""
    policies: tuple[str, ...] = Field(min_length=1, max_length=100)
    """Rules the agent must follow; they become the system prompt."""
    state: State
    """The starting state."""
    tools: tuple[Tool, ...] = Field(min_length=1, max_length=64)
    """Tools the agent may call."""
    tasks: tuple[Task, ...] = ()
    """Authored tasks (optional)."""
    procedures: Procedures = Procedures()
    """Procedures the policies state (identification, checking before a write); none by default."""

    def tool(self, name: str) -> Tool | None:
        """The tool called ``name``, if any."""
        return next((tool for tool in self.tools if tool.name == name), None)

    def system_prompt(self) -> str:
        """The system message an agent of this world receives."""
        lines = [f"You are the support agent of {self.identity.name} ({self.identity.domain}).",
                 self.identity.description, "Policies:"]
        lines += [f"- {policy}" for policy in self.policies]
        lines += [f"- {confirmation_policy(tool)}" for tool in self.tools if tool.confirm]
        if self.procedures.handoff is not None:
            lines.append(f"- {handoff_policy(self.procedures.handoff)}")
        return "\n".join(lines)

    def function_specs(self) -> list[dict[str, Any]]:
        """Every tool as a function spec, in declaration order."""
        return [tool.function_spec() for tool in self.tools]
