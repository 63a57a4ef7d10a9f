"""Generate examples/library_desk/world.json: the front desk of the Harbor City Public Library.

The fourth example (issue 28): a desk whose patrons identify two ways (by email, or by full name and zip code),
whose loans reference both the copy lent and the patron and declare the patron as their owner, whose fines are
paid with one of the patron's own payment methods after a confirmation that states the amount and the method,
and whose patrons renew several loans at once (a list argument). Built with ``--max-tasks 20`` it holds more
tool-using tasks than the old fixed cap of 12.

Deterministic: every random choice comes from ``random.Random(SEED)``, so running this script twice writes
byte-identical output. Run with ``python examples/library_desk/generate.py``.
"""

from __future__ import annotations

import json
import random
from datetime import date, timedelta
from pathlib import Path

SEED = 20261202
TODAY = date(2026, 12, 2)
OUT = Path(__file__).with_name("world.json")
PATRONS = 220
COPIES = 400
FIRST = ["Amara", "Bruno", "Celia", "Darius", "Elena", "Farid", "Greta", "Hiro", "Ingrid", "Jamal", "Keiko", "Lars",
         "Mirela", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Soren", "Tamsin", "Ulla", "Viktor", "Wen", "Yara"]
LAST = ["Achebe", "Bergstrom", "Castillo", "Dubois", "Eriksen", "Ferreira", "Grunwald", "Hayashi", "Ibarra",
        "Janssen", "Kowalski", "Lindqvist", "Moreau", "Novak", "Okafor", "Pellegrini", "Quist", "Rahman", "Salo",
        "Takeda", "Urquhart", "Varga", "Whitfield", "Zamora"]
ZIPS = ["98101", "98102", "98103", "98104", "98105", "98107", "98109", "98112", "98115", "98116", "98117", "98122"]
TITLES = ["The Salt Road", "Winter Orchard", "A Map of Small Harbors", "The Glass Archivist", "Northern Lights Atlas",
          "Quiet Engines", "The Lighthouse Ledger", "Paper Tides", "Stone and Feather", "The Ninth Lantern",
          "Copper Skies", "A Field Guide to Fog", "The Last Ferry", "Marrow and Thread", "The Clockmaker's Garden",
          "Driftwood Sonnets", "Cartographers of Rain", "The Amber Index", "Low Tide Letters", "The Orchard Keeper"]
BRANCHES = ["central", "harborview", "northgate"]
METHODS = ["card", "gift_card", "paypal"]


def col(name, type_, pk=False, not_null=False, unique=False, references=None, **extra):
    column = {"name": name, "type": type_, "primary_key": pk, "not_null": not_null, "unique": unique,
              "references": references}
    return {**column, **extra}


FINE = {"label": "fine", "currency": "$", "decimals": 2, "minor_units": True}
TABLES = [
    # Loans are declared before the patrons and copies they reference: rows load in dependency order.
    {"name": "loans", "owner": "card_number", "columns": [
        col("loan_id", "INTEGER", pk=True),
        col("barcode", "TEXT", not_null=True, references="copies.barcode"),
        col("card_number", "TEXT", not_null=True, references="patrons.card_number"),
        col("status", "TEXT", not_null=True), col("due_on", "TEXT", not_null=True, label="due date"),
        col("renewals", "INTEGER", not_null=True), col("fine_cents", "INTEGER", not_null=True, **FINE)],
     "checks": ["fine_cents >= 0"]},
    {"name": "patrons", "columns": [
        col("patron_id", "INTEGER", pk=True), col("name", "TEXT", not_null=True),
        col("email", "TEXT", not_null=True, unique=True), col("zip", "TEXT", not_null=True, label="zip code"),
        col("card_number", "TEXT", not_null=True, unique=True, label="library card number"),
        col("home_branch", "TEXT", not_null=True, label="home branch")]},
    {"name": "copies", "columns": [
        col("barcode", "TEXT", pk=True), col("title", "TEXT", not_null=True),
        col("branch", "TEXT", not_null=True), col("shelf", "TEXT", not_null=True)]},
    {"name": "payment_methods", "columns": [
        col("method_id", "TEXT", pk=True, label="payment method"),
        col("patron_id", "INTEGER", not_null=True, references="patrons.patron_id"),
        col("kind", "TEXT", not_null=True)]},
    {"name": "payments", "columns": [
        col("payment_id", "INTEGER", pk=True),
        col("loan_id", "INTEGER", not_null=True, references="loans.loan_id"),
        col("method_id", "TEXT", not_null=True, references="payment_methods.method_id"),
        col("amount_cents", "INTEGER", not_null=True, **{**FINE, "label": "amount"})], "owner": "loan_id"},
]


def build_rows(rng: random.Random) -> dict[str, list[list]]:
    patrons, methods, copies, loans = [], [], [], []
    names: set[tuple[str, str]] = set()
    for patron_id in range(1, PATRONS + 1):
        while True:
            name, zip_code = f"{rng.choice(FIRST)} {rng.choice(LAST)}", rng.choice(ZIPS)
            if (name, zip_code) not in names:  # name and zip together identify one patron
                names.add((name, zip_code))
                break
        email = f"{name.lower().replace(' ', '.')}{patron_id}@harbormail.example"
        card = f"HC{2100000 + patron_id * 37}"
        patrons.append([patron_id, name, email, zip_code, card, rng.choice(BRANCHES)])
        for kind in rng.sample(METHODS, rng.randint(1, 3)):
            methods.append([f"{kind}_{patron_id}{rng.randint(100, 999)}", patron_id, kind])
    for number in range(COPIES):
        copies.append([f"3{number * 7919 % 1000000:06d}", TITLES[number % len(TITLES)], rng.choice(BRANCHES),
                       f"{rng.choice('ABCDEFG')}{rng.randint(1, 40)}"])
    loan_id = 5000
    for patron in patrons:
        for copy in rng.sample(copies, rng.randint(0, 4)):
            status = rng.choices(["out", "overdue", "returned"], [5, 3, 2])[0]
            due = TODAY + timedelta(days=rng.randint(-30, 20) if status != "overdue" else rng.randint(-40, -1))
            fine = rng.choice([25, 50, 75, 125, 200, 350]) if status == "overdue" else 0
            loans.append([loan_id, copy[0], patron[4], status, due.isoformat(), rng.randint(0, 2), fine])
            loan_id += 1
    return {"loans": loans, "patrons": patrons, "copies": copies, "payment_methods": methods, "payments": []}


def prop(type_, description, **extra):
    return {"type": type_, "description": description, **extra}


def tool(name, description, effect, properties, statements, shape, *, required=None, preconditions=(),
         anchors=None, **extra):
    result = {"shape": shape}
    if shape == "row":
        result["not_found"] = extra.pop("not_found", f"no matching {name.split('_')[-1]}")
    return {"name": name, "description": description, "effect": effect,
            "parameters": {"type": "object", "additionalProperties": False,
                           "required": list(properties) if required is None else required, "properties": properties},
            "statements": statements, "preconditions": list(preconditions), "result": result,
            "anchors": anchors or {}, **extra}


PATRON = "patron_id, name, email, zip, card_number, home_branch"
LOAN = "loan_id, barcode, card_number, status, due_on, renewals, fine_cents"
LOAN_ID = prop("integer", "Loan number, e.g. 5012.")
PATRON_ID = prop("integer", "Patron id as returned by a find_patron tool.")
CARD_OF = "SELECT card_number FROM patrons WHERE patron_id = :patron_id"
TEXT = {"maxLength": 200}
LOAN_EXISTS = {"sql": "SELECT EXISTS (SELECT 1 FROM loans WHERE loan_id = :loan_id)", "error": "No such loan."}
CALCULATE = {"name": "calculate", "effect": "none", "builtin": "calculate", "result": {"shape": "recorded"},
             "description": "Work out arithmetic: add up listed amounts (e.g. 12.5 + 30 + 7.25), or count listed "
                            "items by adding 1 per item (1 + 1 + 1).",
             "parameters": {"type": "object", "additionalProperties": False, "required": ["expression"],
                            "properties": {"expression": {"type": "string", "maxLength": 500,
                                                          "description": "Numbers with + - * / and parentheses."}}}}
"""The desk's calculator (the ``calculate`` built-in): aggregate answers quote its result."""

TOOLS = [
    tool("find_patron_by_email", "Find a patron by the email address on their account.", "read",
         {"email": prop("string", "Email address", **TEXT)}, [f"SELECT {PATRON} FROM patrons WHERE email = :email"],
         "row", anchors={"email": "patrons.email"}, not_found="no patron with that email"),
    tool("find_patron_by_name_zip", "Find a patron by full name and home zip code.", "read",
         {"name": prop("string", "Full name", **TEXT), "zip": prop("string", "Zip code", **TEXT)},
         [f"SELECT {PATRON} FROM patrons WHERE name = :name AND zip = :zip"], "row",
         anchors={"name": "patrons.name", "zip": "patrons.zip"}, not_found="no patron with that name and zip code"),
    tool("get_loan", "Look up one loan by its number.", "read", {"loan_id": LOAN_ID},
         [f"SELECT {LOAN} FROM loans WHERE loan_id = :loan_id"], "row", anchors={"loan_id": "loans.loan_id"},
         not_found="no loan with that number"),
    tool("get_patron", "Look up one patron by id.", "read", {"patron_id": PATRON_ID},
         [f"SELECT {PATRON} FROM patrons WHERE patron_id = :patron_id"], "row",
         anchors={"patron_id": "patrons.patron_id"}, not_found="no patron with that id"),
    tool("get_copy", "Look up one copy of a book by its barcode.", "read",
         {"barcode": prop("string", "Barcode on the copy, e.g. 3007919", **TEXT)},
         ["SELECT barcode, title, branch, shelf FROM copies WHERE barcode = :barcode"], "row",
         anchors={"barcode": "copies.barcode"}, not_found="no copy with that barcode"),
    tool("list_loans", "List a patron's loans.", "read", {"patron_id": PATRON_ID},
         [f"SELECT {LOAN} FROM loans WHERE card_number = (SELECT card_number FROM patrons WHERE patron_id = "
          ":patron_id) ORDER BY loan_id"], "rows",
         anchors={"patron_id": "patrons.patron_id"}, result_noun="loans",
         counts_exclude={"column": "status", "values": ["returned"], "wording": "not counting returned books"}),
    tool("list_payment_methods", "List a patron's saved payment methods.", "read", {"patron_id": PATRON_ID},
         ["SELECT method_id, kind FROM payment_methods WHERE patron_id = :patron_id ORDER BY method_id"], "rows",
         anchors={"patron_id": "patrons.patron_id"}, result_noun="payment methods"),
    tool("renew_loan", "Renew one loan for 21 more days (at most two renewals, never an overdue loan).", "write",
         {"loan_id": LOAN_ID},
         ["UPDATE loans SET due_on = date(due_on, '+21 days'), renewals = renewals + 1 WHERE loan_id = :loan_id",
          f"SELECT {LOAN} FROM loans WHERE loan_id = :loan_id"], "row",
         preconditions=[LOAN_EXISTS, {"sql": "SELECT status = 'out' AND renewals < 2 FROM loans WHERE loan_id = "
                                             ":loan_id", "error": "Only loans that are out, not overdue, with fewer "
                                             "than two renewals can be renewed.",
                                      "explanation": "only a book that is out, not overdue and renewed fewer than "
                                                     "two times can be renewed"}],
         anchors={"loan_id": "loans.loan_id"}, action="renew"),
    tool("renew_loans", "Renew several of a patron's loans at once (each must be out, not overdue).", "write",
         {"patron_id": PATRON_ID, "loan_ids": prop("array", "Loan numbers to renew", items={"type": "integer"})},
         ["UPDATE loans SET due_on = date(due_on, '+21 days'), renewals = renewals + 1 WHERE card_number = "
          f"({CARD_OF}) AND loan_id IN (SELECT value FROM json_each(:loan_ids))"], "affected",
         preconditions=[{"sql": "SELECT EXISTS (SELECT 1 FROM patrons WHERE patron_id = :patron_id)",
                         "error": "No such patron."},
                        {"sql": "SELECT COUNT(*) = json_array_length(:loan_ids) AND COUNT(*) > 0 FROM loans WHERE "
                                f"card_number = ({CARD_OF}) AND status = 'out' AND renewals < 2 AND loan_id IN "
                                "(SELECT value FROM json_each(:loan_ids))",
                         "error": "Every loan must be this card's, out, not overdue, with fewer than two renewals.",
                         "explanation": "only books that are out, not overdue and renewed fewer than two times can "
                                        "be renewed"}],
         anchors={"patron_id": "patrons.patron_id", "loan_ids": "loans.loan_id"},
         action="renew loans {loan_ids} on {row}"),
    tool("pay_fine", "Pay the whole fine of an overdue loan with one of the patron's payment methods.", "write",
         {"loan_id": LOAN_ID, "amount_cents": prop("integer", "The fine in cents"),
          "method_id": prop("string", "A payment method of the patron", **TEXT)},
         ["INSERT INTO payments (loan_id, method_id, amount_cents) VALUES (:loan_id, :method_id, :amount_cents)",
          "UPDATE loans SET fine_cents = 0 WHERE loan_id = :loan_id",
          f"SELECT {LOAN} FROM loans WHERE loan_id = :loan_id"], "row",
         preconditions=[LOAN_EXISTS,
                        {"sql": "SELECT fine_cents > 0 AND fine_cents = :amount_cents FROM loans WHERE loan_id = "
                                ":loan_id", "error": "The amount must be the loan's whole fine.",
                         "explanation": "there is no fine to pay on it"},
                        {"sql": "SELECT EXISTS (SELECT 1 FROM payment_methods m JOIN patrons p ON p.patron_id = "
                                "m.patron_id JOIN loans l ON l.card_number = p.card_number WHERE m.method_id = "
                                ":method_id AND l.loan_id = :loan_id)",
                         "error": "That payment method is not the patron's."}],
         anchors={"loan_id": "loans.loan_id", "amount_cents": "loans.fine_cents",
                  "method_id": "payment_methods.method_id"},
         action="pay the fine of {row} with {method_id}", confirm={"states": ["amount_cents", "method_id"]}),
    tool("set_home_branch", "Change a patron's home branch (where holds are picked up).", "write",
         {"patron_id": PATRON_ID, "home_branch": prop("string", "The new home branch", enum=BRANCHES)},
         ["UPDATE patrons SET home_branch = :home_branch WHERE patron_id = :patron_id"], "affected",
         preconditions=[{"sql": "SELECT EXISTS (SELECT 1 FROM patrons WHERE patron_id = :patron_id)",
                         "error": "No such patron."},
                        {"sql": "SELECT home_branch <> :home_branch FROM patrons WHERE patron_id = :patron_id",
                         "error": "That is already the patron's home branch."},
                        {"sql": "SELECT NOT EXISTS (SELECT 1 FROM loans l JOIN patrons p ON p.card_number = "
                                "l.card_number WHERE p.patron_id = :patron_id AND l.status = 'overdue')",
                         "error": "Patrons with overdue loans cannot change branch.",
                         "explanation": "a patron with an overdue book cannot change their home branch"}],
         anchors={"patron_id": "patrons.patron_id"}, action="set the home branch of {row} to {home_branch}",
         confirm={"states": ["home_branch"]}),
]
POLICIES = [
    "Identify the patron first: by the email on their account, or by their full name and home zip code.",
    "Only discuss and change the identified patron's own loans, fines and payment methods.",
    "A loan can be renewed only while it is out (not overdue) and has been renewed fewer than two times.",
    "Fines are paid in full, with one of the patron's own saved payment methods, after they confirm the amount.",
    "Quote fines in dollars with two decimals; never invent loan data: answer from tool results.",
]


def build_tasks(rows):
    patron = next(p for p in rows["patrons"] if any(loan[2] == p[4] and loan[3] == "overdue" for loan in rows["loans"]))
    overdue = [loan for loan in rows["loans"] if loan[2] == patron[4] and loan[3] == "overdue"]
    other = next(p for p in rows["patrons"][40:] if any(loan[2] == p[4] for loan in rows["loans"]))
    first_loan = next(loan for loan in rows["loans"] if loan[2] == other[4])
    return [
        {"instruction": f"My name is {patron[1]} and my zip code is {patron[3]}. How many overdue books do I have?",
         "anchor": {"table": "patrons", "key": patron[0]},
         "reference": [{"tool": "find_patron_by_name_zip", "arguments": {"name": patron[1], "zip": patron[3]}},
                       {"tool": "list_loans", "arguments": {"patron_id": {"$from": 0, "pointer": "/patron_id"}}}],
         "answer": f"You have {len(overdue)} overdue book{'s' if len(overdue) != 1 else ''}.",
         "vcode": {"checks": [
             {"kind": "tool_called", "tool": "find_patron_by_name_zip",
              "arguments": {"name": patron[1], "zip": patron[3]}},
             {"kind": "tool_called", "tool": "list_loans", "arguments": {"patron_id": patron[0]}},
             {"kind": "answer", "mode": "number", "value": len(overdue)}, {"kind": "unchanged_except"}]}},
        {"instruction": f"Hi, this is {other[2]}. When is loan {first_loan[0]} due?",
         "anchor": {"table": "loans", "key": first_loan[0]},
         "reference": [{"tool": "find_patron_by_email", "arguments": {"email": other[2]}},
                       {"tool": "get_loan", "arguments": {"loan_id": first_loan[0]}}],
         "answer": f"Loan {first_loan[0]} is due on {first_loan[4]}.",
         "vcode": {"checks": [
             {"kind": "tool_called", "tool": "find_patron_by_email", "arguments": {"email": other[2]}},
             {"kind": "order", "tools": ["find_patron_by_email", "get_loan"]},
             {"kind": "answer", "mode": "contains", "value": first_loan[4], "field": "loans.due_on"},
             {"kind": "unchanged_except"}]}},
    ]


def main() -> None:
    rng = random.Random(SEED)
    rows = build_rows(rng)
    world = {
        "format_version": "1",
        "identity": {
            "id": "harbor-library", "name": "Harbor City Public Library", "domain": "library front desk",
            "description": "The Harbor City Public Library lends books from three branches. Its front desk helps "
                           "patrons with their loans, renewals, fines and home branch."},
        "policies": POLICIES,
        "state": {
            "tables": TABLES,
            "anchors": [
                {"table": "patrons", "label": "account", "natural_keys": ["email", "name", "zip"],
                 "internal_key": True, "answer_fields": ["card_number", "home_branch"]},
                {"table": "loans", "label": "loan", "answer_fields": ["due_on", "status", "fine_cents"]},
                {"table": "copies", "label": "copy", "named_as": "the copy with barcode {barcode}",
                 "answer_fields": ["title", "branch", "shelf"]}],
            "rows": rows},
        "tools": [*TOOLS, CALCULATE],
        "tasks": build_tasks(rows),
        "procedures": {"identify": ["find_patron_by_email", "find_patron_by_name_zip"], "check_before_write": True},
    }
    OUT.write_text(json.dumps(world, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    counts = ", ".join(f"{name} {len(table)}" for name, table in rows.items())
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes): {counts}")


if __name__ == "__main__":
    main()
