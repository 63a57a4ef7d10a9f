"""Lookups that read the seed on demand (entity roots, the natural keys a procedure check looks for) find what a
read of every row finds: checked against that full read on every row and value of the example worlds."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

from world_format.canonical import canonical_json
from world_format.entities import Entities, owning_reference
from world_format.keys import key_expression, key_from_sql, normalize_key
from world_format.loaded import LoadedWorld
from world_format.loader import load_world
from world_format.models import Table
from world_format.procedures import identification
from world_format.revealing import MIN_REVEALED_CHARS, Revealing, own_normal_form
from world_format.seed_copy import SeedCopy
from world_format.sqlguard import open_memory_copy
from world_format.state import quote_identifier
from world_format.values import normalize_text

EXAMPLES = sorted((ROOT / "examples").glob("*/world.json"))


def _rows(loaded: LoadedWorld, table_name: str, select: str) -> list[tuple[Any, ...]]:
    runtime = loaded.runtime()
    try:
        return runtime.pristine.execute(f"SELECT {select} FROM {quote_identifier(table_name)}").fetchall()
    finally:
        runtime.close()


def _full_read_roots(loaded: LoadedWorld) -> dict[tuple[str, str], tuple[str, str]]:
    """Every row's root by a read of every row, following owning references (worlds without cycles)."""
    world = loaded.world
    parent: dict[tuple[str, str], tuple[str, str] | None] = {}
    for table in world.state.tables:
        owner = owning_reference(table)
        name = quote_identifier(table.name)
        for key, value in _rows(loaded, table.name, f"{key_expression(table, name)}, "
                                f"{quote_identifier(owner.name) if owner else 'NULL'}"):
            me = (table.name, canonical_json(normalize_key(key_from_sql(table, key))))
            if owner is None or owner.references is None or value is None:
                parent[me] = None
                continue
            target_name, column = owner.references.split(".")
            target = world.state.table(target_name)
            assert target is not None
            if target.key_columns == (column,):
                parent[me] = (target_name, canonical_json(normalize_key(value)))
            else:
                found = [k for v, k in _rows(loaded, target_name, f"{quote_identifier(column)}, "
                                             f"{key_expression(target, quote_identifier(target_name))}") if v == value]
                parent[me] = (target_name, canonical_json(normalize_key(key_from_sql(target, found[0]))))

    def root(row: tuple[str, str]) -> tuple[str, str]:
        up = parent.get(row)
        while up is not None and up in parent:
            row, up = up, parent[up]
        return row

    return {row: root(row) for row in parent}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.parent.name)
def test_entity_roots_looked_up_on_demand_are_those_of_a_full_read(path: Path) -> None:
    loaded = load_world(path)
    runtime = loaded.runtime()
    with runtime.guard.host() as conn:
        entities = Entities(loaded.world, conn)
    runtime.close()
    expected = _full_read_roots(loaded)
    for (table, canonical), (root_table, root_key) in expected.items():
        key = normalize_key(json.loads(canonical))
        found_table, found_key = entities.root(table, key)
        assert (found_table, canonical_json(normalize_key(found_key))) == (root_table, root_key), (table, key)
    assert entities.root("customers" if loaded.world.state.table("customers") else "patrons", -987654321)[1] \
        == -987654321  # a row the seed lacks is its own root


def _full_read_holders(conn: sqlite3.Connection, table: Table, columns: tuple[str, ...]) -> dict[str, Any]:
    """The natural-key values by first token, by a read and normalization of every value (as before on demand)."""
    holders: dict[str, set[str]] = {}
    name = quote_identifier(table.name)
    for column in columns:
        for key, value in conn.execute(f"SELECT {key_expression(table, name)}, {quote_identifier(column)} FROM {name}"):
            text = normalize_text(str(value)) if value is not None else ""
            if len(text) >= MIN_REVEALED_CHARS:
                holders.setdefault(text, set()).add(canonical_json(normalize_key(key_from_sql(table, key))))
    by_token: dict[str, list[tuple[str, frozenset[str]]]] = {}
    for text, customers in sorted(holders.items()):
        by_token.setdefault(text.split(" ", 1)[0], []).append((text, frozenset(customers)))
    return {token: tuple(values) for token, values in by_token.items()}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.parent.name)
def test_natural_keys_found_on_demand_are_those_of_a_full_read(path: Path) -> None:
    loaded = load_world(path)
    ident = identification(loaded.world)
    assert ident is not None
    table, anchor = loaded.world.state.table(ident.table), loaded.world.state.anchor(ident.table)
    assert table is not None and anchor is not None
    conn = open_memory_copy(loaded.seed)
    # some values not in their own normal form, and one shared by two customers once normalized
    conn.execute(f"UPDATE {quote_identifier(table.name)} SET email = upper(email) WHERE rowid % 7 = 0")
    conn.execute(f"UPDATE {quote_identifier(table.name)} SET email = ' ' || email || '.' WHERE rowid % 11 = 0")
    name = quote_identifier(table.name)
    (_, first), (two, _) = conn.execute(f"SELECT rowid, email FROM {name} WHERE rowid % 7 AND rowid % 11 "
                                          "ORDER BY rowid LIMIT 2").fetchall()
    conn.execute(f"UPDATE {name} SET email = ? WHERE rowid = ?", (first.upper(), two))
    expected = _full_read_holders(conn, table, tuple(anchor.natural_keys))
    revealing = Revealing(loaded.world, SeedCopy(conn), table, tuple(anchor.natural_keys))
    conn.close()
    assert len(expected) > 100 and any(len(values[0][1]) == 2 for values in expected.values())
    for token, values in expected.items():
        assert revealing.holders(token) == values, token
    assert revealing.holders("nobody.has.this@example.invalid") == ()


@pytest.mark.parametrize("text", ["ana.lee@example.com", "a_1@b-c.d", "x", "a.b", "9786517269898"])
def test_a_value_in_its_own_normal_form_normalizes_to_itself(text: str) -> None:
    assert own_normal_form(text) and normalize_text(text) == text


@pytest.mark.parametrize("text", ["Ana.Lee@example.com", "a b", "a.", ".a", "a..b", "a@.b", "a.@b", "é", "#12", "",
                                  "-a", "a-", "a--b"])
def test_a_value_normalize_text_changes_is_not_in_its_own_normal_form(text: str) -> None:
    assert not own_normal_form(text)
