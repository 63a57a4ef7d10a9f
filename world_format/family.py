"""Task families: an authored task filled in from each row of a query over the starting state.

A family task is a template. ``"{{email}}"`` as a whole string becomes the row's ``email`` value
with its type (an integer stays an integer), and ``"... {{email}} ..."`` inside a longer string
becomes its text. The filled-in task is validated as an ordinary :class:`Task`; the build then
admits a row only when its reference chain passes its verifier (see ``blobkit.builder``).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Generator, Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from world_format.errors import WorldFormatError

from .models import Task

if TYPE_CHECKING:
    from .runtime import WorldRuntime

SLOT = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}")
WHOLE_SLOT = re.compile(r"^\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}$")
FAMILY_ROW_LIMIT = 5_000_000
"""Most rows a family query may return when it is read whole (:func:`iter_family_rows`, which ``blobkit info``
counts); a build reads at most :data:`FAMILY_SAMPLE_ROWS` of them."""
FAMILY_QUERY_SECONDS = 60.0
"""Time budget of one run of a family query."""


def _template(task: Task) -> dict[str, Any]:
    return task.model_dump(mode="json", by_alias=True, exclude={"family"})


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _slots_in(template: dict[str, Any]) -> set[str]:
    return {name for text in _strings(template) for name in SLOT.findall(text)}


def slots(task: Task) -> set[str]:
    """Names of the {{slots}} a family task uses."""
    return _slots_in(_template(task))


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _fill(value: Any, row: dict[str, Any]) -> Any:
    if isinstance(value, str):
        whole = WHOLE_SLOT.match(value)
        if whole:
            return row[whole.group(1)]
        return SLOT.sub(lambda match: _text(row[match.group(1)]), value)
    if isinstance(value, dict):
        return {_fill(key, row): _fill(item, row) for key, item in value.items()}
    if isinstance(value, list):
        return [_fill(item, row) for item in value]
    return value


def fill(task: Task, row: dict[str, Any], where: str = "task") -> Task:
    """The family task filled in from one query row, validated as an ordinary task."""
    template = _template(task)
    missing = sorted(_slots_in(template) - set(row))
    if missing:
        raise WorldFormatError(f"{where}: slot {{{{{missing[0]}}}}} is not a column of /family/query")
    try:
        return Task.model_validate(_fill(template, row))
    except ValidationError as exc:
        first = exc.errors()[0]
        location = "/".join(str(part) for part in first["loc"])
        raise WorldFormatError(f"{where}: filled in from row {row}: /{location}: {first['msg']}") from None


MEMO_KEY = "family_rows"

FAMILY_SAMPLE_ROWS = 20_000
"""Most rows of a family query a build reads (:func:`family_sample`): a query that returns more is sampled, its
first rows in the order it returns them. Far above the example worlds' families (at most a few thousand rows), so
their kits read every row; a desk with millions of rows reads a bounded sample instead of a pass per family."""


@dataclass(frozen=True)
class FamilySample:
    """The rows a family query gave a build, as read: at most :data:`FAMILY_SAMPLE_ROWS`."""

    columns: tuple[str, ...]
    """The query's column names, in its order."""
    rows: tuple[tuple[Any, ...], ...]
    """The rows read, in the order the query returned them."""
    more: bool
    """Whether the query returns more rows than were read (the sample was cut)."""

    def dicts(self) -> Iterator[dict[str, Any]]:
        """Each row as column → value."""
        for row in self.rows:
            yield dict(zip(self.columns, row, strict=True))


def remember_family_rows(runtime: WorldRuntime) -> None:
    """Have :func:`family_sample` (and :func:`first_family_row`) keep each query's sample on this runtime (and its
    forks): the first run reads it, later ones reuse it. A build runs each family query twice (validation reads
    its first row, minting the sample); a query that sorts (a window function) costs as much for its first row as
    for all of them."""
    runtime.memo.setdefault(MEMO_KEY, {})


def family_sample(runtime: WorldRuntime, task: Task, where: str = "task",
                  limit: int | None = None) -> FamilySample:
    """The first ``limit`` rows (default :data:`FAMILY_SAMPLE_ROWS`) of the family's query over the starting state,
    and whether it returns more (memoized per query when the runtime keeps them, :func:`remember_family_rows`).

    The query runs read-only under the world's authorizer with a budget of :data:`FAMILY_QUERY_SECONDS`
    (WorldFormatError when it is not a read-only SELECT, fails or runs out of time).
    """
    if task.family is None:
        raise WorldFormatError(f"{where}: not a family task")
    limit = FAMILY_SAMPLE_ROWS if limit is None else limit
    kept = runtime.memo.get(MEMO_KEY)
    memo_key = (task.family.query, limit)
    if isinstance(kept, dict) and memo_key in kept:
        sample: FamilySample = kept[memo_key]
        return sample
    columns: list[str] = []
    rows: list[tuple[Any, ...]] = []
    with closing(_query_batches(runtime, task.family.query, where)) as batches:
        for names, batch in batches:
            columns = names
            rows.extend(batch)
            if len(rows) > limit:
                break
    sample = FamilySample(tuple(columns), tuple(rows[:limit]), len(rows) > limit)
    if isinstance(kept, dict):
        kept[memo_key] = sample
    return sample


def iter_family_rows(runtime: WorldRuntime, task: Task, where: str = "task") -> Generator[dict[str, Any]]:
    """Every row of the family's query over the starting state, as column → value, streamed.

    The query runs read-only under the world's authorizer with a budget of
    :data:`FAMILY_QUERY_SECONDS`; more than :data:`FAMILY_ROW_LIMIT` rows is an error.
    """
    if task.family is None:
        raise WorldFormatError(f"{where}: not a family task")
    with closing(_query_batches(runtime, task.family.query, where)) as batches:
        for columns, batch in batches:
            for row in batch:
                yield dict(zip(columns, row, strict=True))


def _query_batches(runtime: WorldRuntime, query: str, where: str) -> Generator[tuple[list[str], list[Any]]]:
    """The family query's rows in batches, each with the column names."""
    count = 0
    try:
        with runtime.guard.world("read", timeout_s=FAMILY_QUERY_SECONDS) as conn:
            cursor = conn.execute(query)
            if cursor.description is None:
                raise WorldFormatError(f"{where}/family/query: must be a SELECT that returns rows")
            columns = [column[0] for column in cursor.description]
            if len(set(columns)) != len(columns):
                raise WorldFormatError(f"{where}/family/query: column names must be distinct, got {columns}")
            while batch := cursor.fetchmany(1000):
                count += len(batch)
                if count > FAMILY_ROW_LIMIT:
                    raise WorldFormatError(
                        f"{where}/family/query: returns more than {FAMILY_ROW_LIMIT} rows; narrow it")
                yield columns, batch
    except (sqlite3.Error, sqlite3.Warning) as exc:
        message = str(exc)
        if "not authorized" in message:
            message = "uses an operation a read-only query may not perform"
        elif "interrupted" in message:
            message = f"ran past its {FAMILY_QUERY_SECONDS:.0f} s budget"
        raise WorldFormatError(f"{where}/family/query: {message}") from None


def first_family_row(runtime: WorldRuntime, task: Task, where: str = "task") -> dict[str, Any] | None:
    """The first row the family's query returns, or None when it returns none (from its memoized sample when the
    runtime keeps them, :func:`remember_family_rows`)."""
    if isinstance(runtime.memo.get(MEMO_KEY), dict):
        return next(family_sample(runtime, task, where).dicts(), None)
    rows = iter_family_rows(runtime, task, where)
    try:
        return next(rows, None)
    finally:
        rows.close()
