"""A small world built in code, for unit tests (the realistic ones live in examples/)."""

from __future__ import annotations

import copy
from typing import Any

STATUSES = ["pending", "shipped", "delivered", "cancelled"]
FIRST = ["ana", "ben", "chloe", "dev", "eli", "fay", "gus", "hana", "ivan", "jo", "kai", "lena"]


def _customers() -> list[list[Any]]:
    return [[i, f"{FIRST[i % len(FIRST)].title()} Smith{i}", f"{FIRST[i % len(FIRST)]}{i}@example.com",
             ["gold", "silver", "bronze"][i % 3]] for i in range(1, 25)]


def _orders() -> list[list[Any]]:
    return [[100 + i, 1 + (i * 7) % 24, STATUSES[i % 4], round(10 + i * 3.25, 2)] for i in range(60)]


def small_world() -> dict[str, Any]:
    """A fresh copy of the small shop world (single-file form)."""
    world: dict[str, Any] = {
        "format_version": "1",
        "identity": {"id": "acme-shop", "name": "Acme Shop", "domain": "retail support",
                     "description": "Acme Shop sells hardware online; the agent helps customers with orders."},
        "policies": ["Look an order up before changing it.", "Only pending orders can be cancelled.",
                     "Never invent order data; answer from tool results."],
        "state": {
            "tables": [
                {"name": "customers", "columns": [
                    {"name": "id", "type": "INTEGER", "primary_key": True},
                    {"name": "name", "type": "TEXT", "not_null": True},
                    {"name": "email", "type": "TEXT", "not_null": True, "unique": True},
                    {"name": "tier", "type": "TEXT", "not_null": True}]},
                {"name": "orders", "columns": [
                    {"name": "id", "type": "INTEGER", "primary_key": True},
                    {"name": "customer_id", "type": "INTEGER", "not_null": True, "references": "customers.id"},
                    {"name": "status", "type": "TEXT", "not_null": True},
                    {"name": "total", "type": "REAL", "not_null": True}]},
            ],
            "anchors": [
                {"table": "customers", "label": "customer", "natural_keys": ["email"], "answer_fields": ["tier"]},
                {"table": "orders", "label": "order", "answer_fields": ["status", "total"]},
            ],
            "rows": {"customers": _customers(), "orders": _orders()},
        },
        "tools": [
            {"name": "get_order", "description": "Look up one order by id.", "effect": "read",
             "parameters": {"type": "object", "additionalProperties": False, "required": ["order_id"],
                            "properties": {"order_id": {"type": "integer", "description": "Order id"}}},
             "statements": ["SELECT id, customer_id, status, total FROM orders WHERE id = :order_id"],
             "result": {"shape": "row", "not_found": "no order with that id"},
             "anchors": {"order_id": "orders.id"}},
            {"name": "get_customer", "description": "Look up one customer by id.", "effect": "read",
             "parameters": {"type": "object", "additionalProperties": False, "required": ["customer_id"],
                            "properties": {"customer_id": {"type": "integer", "description": "Customer id"}}},
             "statements": ["SELECT id, name, email, tier FROM customers WHERE id = :customer_id"],
             "result": {"shape": "row", "not_found": "no customer with that id"},
             "anchors": {"customer_id": "customers.id"}},
            {"name": "find_customer_by_email", "description": "Find a customer by email address.", "effect": "read",
             "parameters": {"type": "object", "additionalProperties": False, "required": ["email"],
                            "properties": {"email": {"type": "string", "maxLength": 200,
                                                     "description": "Email address"}}},
             "statements": ["SELECT id, name, email, tier FROM customers WHERE email = :email"],
             "result": {"shape": "row", "not_found": "no customer with that email"},
             "anchors": {"email": "customers.email"}},
            {"name": "list_orders", "description": "List a customer's orders.", "effect": "read",
             "parameters": {"type": "object", "additionalProperties": False, "required": ["customer_id"],
                            "properties": {"customer_id": {"type": "integer", "description": "Customer id"}}},
             "statements": ["SELECT id, status, total FROM orders WHERE customer_id = :customer_id ORDER BY id"],
             "result": {"shape": "rows"}, "anchors": {"customer_id": "customers.id"}, "result_noun": "orders"},
            {"name": "cancel_order", "description": "Cancel a pending order.", "effect": "write",
             "parameters": {"type": "object", "additionalProperties": False, "required": ["order_id"],
                            "properties": {"order_id": {"type": "integer", "description": "Order id"}}},
             "preconditions": [
                 {"sql": "SELECT COUNT(*) FROM orders WHERE id = :order_id", "error": "no order with that id"},
                 {"sql": "SELECT status = 'pending' FROM orders WHERE id = :order_id",
                  "error": "only pending orders can be cancelled",
                  "explanation": "it is no longer pending"}],
             "statements": ["UPDATE orders SET status = 'cancelled' WHERE id = :order_id",
                            "SELECT id, status FROM orders WHERE id = :order_id"],
             "result": {"shape": "row"}, "anchors": {"order_id": "orders.id"}, "action": "cancel"},
            {"name": "set_tier", "description": "Change a customer's loyalty tier.", "effect": "write",
             "parameters": {"type": "object", "additionalProperties": False, "required": ["customer_id", "tier"],
                            "properties": {"customer_id": {"type": "integer", "description": "Customer id"},
                                           "tier": {"type": "string", "enum": ["gold", "silver", "bronze"],
                                                    "description": "New tier"}}},
             "preconditions": [{"sql": "SELECT COUNT(*) FROM customers WHERE id = :customer_id",
                                "error": "no customer with that id"}],
             "statements": ["UPDATE customers SET tier = :tier WHERE id = :customer_id"],
             "result": {"shape": "affected"}, "anchors": {"customer_id": "customers.id"},
             "action": "change the tier of"},
        ],
        "tasks": [
            {"instruction": "Please cancel order 100 for me.",
             "anchor": {"table": "orders", "key": 100},
             "reference": [{"tool": "get_order", "arguments": {"order_id": 100}},
                           {"tool": "cancel_order", "arguments": {"order_id": {"$from": 0, "pointer": "/id"}}}],
             "answer": "Order 100 is now cancelled.",
             "vcode": {"checks": [
                 {"kind": "sql", "query": "SELECT status FROM orders WHERE id = :id", "params": {"id": 100},
                  "expect": [["cancelled"]]},
                 {"kind": "tool_called", "tool": "get_order", "arguments": {"order_id": 100}},
                 {"kind": "unchanged_except", "rows": [{"table": "orders", "key": 100}]}]}},
        ],
    }
    return copy.deepcopy(world)


def _patrons() -> list[list[Any]]:
    return [[i, f"{FIRST[i % len(FIRST)].title()} Reader{i}", f"reader{i}@library.example", f"LB{500000 + i * 37}"]
            for i in range(1, 31)]


def _loans() -> list[list[Any]]:
    statuses = ["out", "out", "returned", "overdue"]
    return [[7000 + i, 1 + (i * 7) % 30, f"Title {i}", statuses[i % 4], 25 * (i % 4 == 3) * (1 + i % 7),
             ["main", "east", "west"][i % 3]] for i in range(90)]


def library_world() -> dict[str, Any]:
    """A library front desk whose writes need more than the row's key: a patron's card number (from the
    identified patron), a fine amount in cents (from the loan itself) and a pickup branch (a choice)."""
    def tool(name: str, effect: str, params: dict[str, Any], statements: list[str], shape: str,
             anchors: dict[str, str], **extra: Any) -> dict[str, Any]:
        return {"name": name, "description": f"{name.replace('_', ' ')}.", "effect": effect,
                "parameters": {"type": "object", "additionalProperties": False, "required": list(params),
                               "properties": params},
                "statements": statements, "result": {"shape": shape}, "anchors": anchors, **extra}

    loan_id = {"type": "integer", "description": "Loan number"}
    exists = {"sql": "SELECT EXISTS (SELECT 1 FROM loans WHERE id = :loan_id)", "error": "No such loan."}
    loan_row = "SELECT id, patron_id, title, status, fine_cents, branch FROM loans WHERE id = :loan_id"
    return {
        "format_version": "1",
        "identity": {"id": "city-library", "name": "City Library", "domain": "library front desk",
                     "description": "The City Library lends books; the desk helps patrons with their loans."},
        "policies": ["Verify the patron by their email before discussing their loans.",
                     "Fines are quoted in dollars with two decimals."],
        "state": {
            "tables": [
                {"name": "patrons", "columns": [
                    {"name": "id", "type": "INTEGER", "primary_key": True},
                    {"name": "name", "type": "TEXT", "not_null": True},
                    {"name": "email", "type": "TEXT", "not_null": True, "unique": True},
                    {"name": "card_number", "type": "TEXT", "not_null": True, "unique": True}]},
                {"name": "loans", "columns": [
                    {"name": "id", "type": "INTEGER", "primary_key": True},
                    {"name": "patron_id", "type": "INTEGER", "not_null": True, "references": "patrons.id"},
                    {"name": "title", "type": "TEXT", "not_null": True},
                    {"name": "status", "type": "TEXT", "not_null": True},
                    {"name": "fine_cents", "type": "INTEGER", "not_null": True, "label": "fine", "currency": "$",
                     "decimals": 2, "minor_units": True},
                    {"name": "branch", "type": "TEXT", "not_null": True, "label": "pickup branch"}]}],
            "anchors": [
                {"table": "patrons", "label": "patron", "natural_keys": ["email"], "internal_key": True,
                 "answer_fields": ["name"]},
                {"table": "loans", "label": "loan", "answer_fields": ["fine_cents", "status"]}],
            "rows": {"patrons": _patrons(), "loans": _loans()}},
        "tools": [
            tool("find_patron_by_email", "read", {"email": {"type": "string", "description": "Email"}},
                 ["SELECT id, name, email, card_number FROM patrons WHERE email = :email"], "row",
                 {"email": "patrons.email"}),
            tool("get_loan", "read", {"loan_id": loan_id}, [loan_row], "row", {"loan_id": "loans.id"}),
            tool("list_loans", "read", {"patron_id": {"type": "integer", "description": "Patron id"}},
                 ["SELECT id, title, status, fine_cents FROM loans WHERE patron_id = :patron_id ORDER BY id"],
                 "rows", {"patron_id": "patrons.id"}, result_noun="loans",
                 counts_exclude={"column": "status", "values": ["returned"], "wording": "not counting returned "
                                                                                      "books"}),
            tool("renew_loan", "write", {"loan_id": loan_id, "card_number": {"type": "string",
                                                                              "description": "Library card"}},
                 ["UPDATE loans SET status = 'out' WHERE id = :loan_id", loan_row], "row",
                 {"loan_id": "loans.id", "card_number": "patrons.card_number"}, action="renew",
                 preconditions=[exists, {"sql": "SELECT status = 'overdue' FROM loans WHERE id = :loan_id AND "
                                                "patron_id = (SELECT id FROM patrons WHERE card_number = :card_number)",
                                 "error": "Only overdue loans of this card can be renewed.",
                                 "explanation": "only overdue books are renewed at the desk"}]),
            tool("pay_fine", "write", {"loan_id": loan_id, "amount_cents": {"type": "integer",
                                                                             "description": "Amount in cents"}},
                 ["UPDATE loans SET fine_cents = fine_cents - :amount_cents WHERE id = :loan_id", loan_row], "row",
                 {"loan_id": "loans.id", "amount_cents": "loans.fine_cents"}, action="pay the fine of",
                 preconditions=[exists, {"sql": "SELECT fine_cents > 0 AND :amount_cents = fine_cents FROM loans "
                                        "WHERE id = :loan_id", "error": "No fine is due on this loan.",
                                 "explanation": "there is no fine to pay on it"}]),
            tool("set_pickup", "write", {"loan_id": loan_id, "branch": {"type": "string", "description": "Branch",
                                                                         "enum": ["main", "east", "west"]}},
                 ["UPDATE loans SET branch = :branch WHERE id = :loan_id", loan_row], "row",
                 {"loan_id": "loans.id"}, action="move {row} to the {branch} branch",
                 preconditions=[exists, {"sql": "SELECT status <> 'returned' FROM loans WHERE id = :loan_id",
                                 "error": "The loan is closed.", "explanation": "the book is already back"}]),
        ],
        "procedures": {"identify": "find_patron_by_email", "check_before_write": True},
    }
