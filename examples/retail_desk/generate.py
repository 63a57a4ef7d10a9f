"""Generate examples/retail_desk/world.json: the support desk of Timberline Outfitters.

Deterministic: every random choice comes from ``random.Random(SEED)``, so running this
script twice writes byte-identical output. Run with ``python examples/retail_desk/generate.py``.
"""

from __future__ import annotations

import json
import random
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

SEED = 20261129
TODAY = date(2026, 11, 29)
REFUND_WINDOW_START = (TODAY - timedelta(days=30)).isoformat()  # delivered on or after this date
OUT = Path(__file__).with_name("world.json")

FIRST = ["Avery", "Benjamin", "Camila", "Daniel", "Elena", "Farah", "Gabriel", "Hannah", "Isaac", "Jasmine",
         "Kenji", "Laura", "Mateo", "Nadia", "Owen", "Priya", "Quinn", "Rafael", "Sofia", "Tobias",
         "Uma", "Victor", "Wren", "Xavier", "Yara", "Zoe", "Amara", "Callum", "Diego", "Freya",
         "Aiko", "Bilal", "Chiara", "Dmitri", "Esme", "Femi", "Greta", "Hamza", "Ines", "Joaquin",
         "Keanu", "Leila", "Marisol", "Nikhil", "Olga", "Pablo", "Rosa", "Saoirse", "Tariq", "Ulrich",
         "Valentina", "Wei", "Ximena", "Yusuf", "Zainab", "Anouk", "Bruno", "Cyrus", "Dalia", "Emeka",
         "Fatima", "Gideon", "Hugo", "Ivana", "Jonah", "Kiri", "Lucia", "Malik", "Noor", "Oskar",
         "Petra", "Ravi", "Sven", "Thandiwe", "Ulla", "Vikram", "Willa", "Yosef", "Zara", "Arjun",
         "Beatriz", "Cormac", "Dara", "Elio", "Flora", "Gaspard", "Hiroshi", "Isla", "Jude", "Kaveh"]
LAST = ["Anderson", "Bauer", "Castillo", "Dubois", "Eriksen", "Fischer", "Garcia", "Hughes", "Ito", "Jensen",
        "Kowalski", "Lindqvist", "Morales", "Nakamura", "Okafor", "Patel", "Quinlan", "Rossi", "Schmidt", "Tanaka",
        "Underwood", "Valdez", "Whitaker", "Yilmaz", "Zhang", "Moreau", "Brennan", "Sato", "Novak", "Oyelaran",
        "Abara", "Bianchi", "Chowdhury", "Delgado", "Eze", "Ferreira", "Gallagher", "Haddad", "Iyer", "Jovanovic",
        "Kim", "Larsen", "Mensah", "Nguyen", "Olsen", "Petrov", "Qureshi", "Reyes", "Silva", "Takahashi",
        "Usman", "Varga", "Wojcik", "Xu", "Yamamoto", "Zielinski", "Alvarez", "Becker", "Costa", "Dimitrov",
        "Ekstrom", "Fontaine", "Gupta", "Horvat", "Ibrahim", "Jung", "Kaur", "Lopez", "Murphy", "Nilsen",
        "Ortiz", "Park", "Ramos", "Sokolov", "Tran", "Ueda", "Vasquez", "Weber", "Young", "Zeller",
        "Adeyemi", "Bergstrom", "Carvalho", "Duarte", "Engel", "Fitzgerald", "Grant", "Hoang", "Ivanova", "Jaramillo"]
MAIL_DOMAINS = ["gmail.com", "outlook.com", "yahoo.com", "icloud.com", "proton.me", "fastmail.com"]
CITIES = ["Portland", "Seattle", "Denver", "Boise", "Salt Lake City", "Bend", "Spokane", "Missoula", "Eugene",
          "Tacoma", "Flagstaff", "Santa Fe", "Bozeman", "Reno", "Sacramento", "Asheville", "Burlington", "Duluth"]
LINES = ["Ridgeline", "Summit", "Cascade", "Alpine", "Trailhead", "Basecamp", "Glacier", "Canyon", "Northfork",
         "Switchback", "Talus", "Cirque"]
CATEGORIES = {  # category: (sku code, product nouns, price range)
    "Jackets": ("JKT", ["Down Jacket", "Rain Shell", "Fleece Hoodie", "Softshell Jacket", "Insulated Vest"], (79, 329)),
    "Footwear": ("FTW", ["Hiking Boot", "Trail Runner", "Camp Sandal", "Approach Shoe"], (59, 229)),
    "Packs": ("PCK", ["Daypack 24L", "Backpack 45L", "Hydration Pack", "Duffel 60L"], (39, 279)),
    "Camping": ("CMP", ["Tent 2P", "Sleeping Bag 20F", "Sleeping Pad", "Camp Stove", "Trekking Poles"], (29, 449)),
    "Accessories": ("ACC", ["Merino Beanie", "Wool Socks", "Headlamp", "Water Bottle", "Sun Hoodie"], (12, 69)),
}
REFUND_REASONS = ["damaged", "wrong_item", "not_as_described", "late_delivery", "changed_mind"]


def col(name, type_, pk=False, not_null=False, unique=False, references=None, decimals=None, label=None):
    column = {"name": name, "type": type_, "primary_key": pk, "not_null": not_null, "unique": unique,
              "references": references}
    if decimals is not None:  # every amount of this world is US dollars, quoted with two decimals
        column.update(decimals=decimals, currency="$")
    return {**column, "label": label} if label else column


TABLES = [
    {"name": "customers", "columns": [
        col("id", "INTEGER", pk=True), col("name", "TEXT", not_null=True),
        col("email", "TEXT", not_null=True, unique=True), col("city", "TEXT", not_null=True),
        col("tier", "TEXT", not_null=True), col("joined_on", "TEXT", not_null=True, label="join date")]},
    {"name": "products", "columns": [
        col("id", "INTEGER", pk=True), col("sku", "TEXT", not_null=True, unique=True),
        col("name", "TEXT", not_null=True), col("category", "TEXT", not_null=True),
        col("price", "REAL", not_null=True, decimals=2), col("stock", "INTEGER", not_null=True)]},
    {"name": "orders", "columns": [
        col("id", "INTEGER", pk=True), col("customer_id", "INTEGER", not_null=True, references="customers.id"),
        col("status", "TEXT", not_null=True), col("placed_on", "TEXT", not_null=True, label="order date"),
        col("delivered_on", "TEXT", label="delivery date"), col("shipping_method", "TEXT", not_null=True),
        col("total", "REAL", not_null=True, decimals=2)]},
    {"name": "order_items", "owner": "order_id", "columns": [
        col("id", "INTEGER", pk=True), col("order_id", "INTEGER", not_null=True, references="orders.id"),
        col("product_id", "INTEGER", not_null=True, references="products.id"),
        col("quantity", "INTEGER", not_null=True), col("unit_price", "REAL", not_null=True, decimals=2)]},
    {"name": "refunds", "columns": [
        col("id", "INTEGER", pk=True), col("order_id", "INTEGER", not_null=True, references="orders.id"),
        col("amount", "REAL", not_null=True, decimals=2), col("reason", "TEXT", not_null=True),
        col("issued_on", "TEXT", not_null=True)]},
]


CUSTOMERS = 600
ORDERS = 1400


def build_rows(rng: random.Random, customers_count: int = CUSTOMERS,
               orders_count: int = ORDERS) -> dict[str, list[list]]:
    customers, emails = [], set()
    for index, (first, last) in enumerate(rng.sample([(f, s) for f in FIRST for s in LAST], customers_count)):
        local = rng.choice([f"{first}.{last}", f"{first[0]}{last}", f"{first}{last[0]}", f"{first}_{last}"]).lower()
        email = f"{local}@{rng.choice(MAIL_DOMAINS)}"
        while email in emails:
            email = f"{local}{rng.randint(2, 99)}@{rng.choice(MAIL_DOMAINS)}"
        emails.add(email)
        tier = rng.choices(["standard", "silver", "gold"], [60, 25, 15])[0]
        joined = date(2020, 3, 1) + timedelta(days=rng.randint(0, 2400))
        customers.append([1001 + index, f"{first} {last}", email, rng.choice(CITIES), tier, joined.isoformat()])

    products = []
    for category, (code, nouns, (low, high)) in CATEGORIES.items():
        for number, (line, noun) in enumerate(rng.sample([(ln, n) for ln in LINES for n in nouns], 24), start=1):
            price = rng.randint(low, high) - 0.01
            stock = 0 if rng.random() < 0.1 else rng.randint(3, 140)
            products.append([None, f"TO-{code}-{number:03d}", f"{line} {noun}", category, price, stock])
    for index, product in enumerate(products):
        product[0] = 201 + index

    placed = []
    for _ in range(orders_count):
        if rng.random() < 0.4:  # the Black Friday rush: a backlog of orders not yet shipped
            placed.append(date(2026, 11, 24) + timedelta(days=rng.randint(0, 4)))
        else:
            placed.append(date(2026, 10, 12) + timedelta(days=rng.randint(0, 42)))
    placed.sort()
    orders, items, refunds = [], [], []
    for index, placed_on in enumerate(placed):
        order_id = 50001 + index
        customer_id = rng.choice(customers)[0]
        method = rng.choices(["standard", "express", "overnight"], [70, 22, 8])[0]
        age = (TODAY - placed_on).days
        delivered_on = None
        if age <= 5:
            status = "pending" if rng.random() < 0.9 else "shipped"
        elif age <= 8 or rng.random() < 0.04:
            status = "shipped"
        elif rng.random() < 0.07:
            status = "cancelled"
        else:
            status, delivered_on = "delivered", placed_on + timedelta(days=rng.randint(2, 6))
        total = 0.0
        for product in rng.sample(products, rng.choice([1, 1, 1, 2, 2, 3])):
            quantity = rng.choice([1, 1, 1, 1, 2, 2, 3]) if product[3] == "Accessories" else 1
            unit_price = round(product[4] * 0.8, 2) if placed_on >= date(2026, 11, 27) else product[4]
            items.append([len(items) + 1, order_id, product[0], quantity, unit_price])
            total += quantity * unit_price
        orders.append([order_id, customer_id, status, placed_on.isoformat(),
                       delivered_on and delivered_on.isoformat(), method, round(total, 2)])
        if delivered_on and rng.random() < 0.09:
            issued = min(delivered_on + timedelta(days=rng.randint(1, 12)), TODAY - timedelta(days=1))
            reason = rng.choice(REFUND_REASONS)
            refunds.append([len(refunds) + 1, order_id, round(total, 2), reason, issued.isoformat()])
    return {"customers": customers, "products": products, "orders": orders, "order_items": items,
            "refunds": refunds}


def prop(type_, description, **extra):
    return {"type": type_, "description": description, **extra}


def tool(name, description, effect, properties, statements, shape, *, required=None, preconditions=(),
         anchors=None, not_found=None, result_noun=None, action=None, counts_exclude=None):
    result = {"shape": shape}
    if not_found:
        result["not_found"] = not_found
    spec = {"name": name, "description": description, "effect": effect, "statements": list(statements),
            "parameters": {"type": "object", "properties": properties, "additionalProperties": False,
                           "required": list(properties) if required is None else required},
            "preconditions": [{"sql": sql, "error": error, **({"explanation": why[0]} if why else {})}
                              for sql, error, *why in preconditions],
            "result": result, "anchors": anchors or {}}
    if result_noun:
        spec["result_noun"] = result_noun
    if action:
        spec["action"] = action
    if counts_exclude:
        spec["counts_exclude"] = counts_exclude
    return spec


ORDER_ID = prop("integer", "Order number, e.g. 50123.")
CUSTOMER_ID = prop("integer", "Customer id as returned by find_customer_by_email.")
ORDER_EXISTS = ("SELECT EXISTS (SELECT 1 FROM orders WHERE id = :order_id)", "No order with that number exists.")
ORDER_ROW = ("SELECT id, customer_id, status, placed_on, delivered_on, shipping_method, total FROM orders "
             "WHERE id = :order_id")

CALCULATE = {"name": "calculate", "effect": "none", "builtin": "calculate", "result": {"shape": "recorded"},
             "description": "Work out arithmetic: add up listed amounts (e.g. 12.5 + 30 + 7.25), or count listed "
                            "items by adding 1 per item (1 + 1 + 1).",
             "parameters": {"type": "object", "additionalProperties": False, "required": ["expression"],
                            "properties": {"expression": {"type": "string", "maxLength": 500,
                                                          "description": "Numbers with + - * / and parentheses."}}}}
"""The desk's calculator (the ``calculate`` built-in): aggregate answers quote its result."""

TOOLS = [
    tool("find_customer_by_email", "Look up a customer account by email address (use it to verify identity).",
         "read", {"email": prop("string", "The customer's email address.")},
         ["SELECT id, name, email, city, tier, joined_on FROM customers WHERE email = lower(trim(:email))"],
         "row", anchors={"email": "customers.email"}, not_found="No customer account uses that email address."),
    tool("get_customer", "Get a customer account by id.", "read", {"customer_id": CUSTOMER_ID},
         ["SELECT id, name, email, city, tier, joined_on FROM customers WHERE id = :customer_id"],
         "row", anchors={"customer_id": "customers.id"}, not_found="No customer with that id."),
    tool("list_orders", "List a customer's orders, most recent first.", "read", {"customer_id": CUSTOMER_ID},
         ["SELECT id, status, placed_on, delivered_on, shipping_method, total FROM orders "
          "WHERE customer_id = :customer_id ORDER BY placed_on DESC, id DESC"],
         "rows", anchors={"customer_id": "customers.id"}, result_noun="orders",
         counts_exclude={"column": "status", "values": ["cancelled"], "wording": "not counting cancelled orders"}),
    tool("get_order", "Get one order with its refunded amount and item count.", "read", {"order_id": ORDER_ID},
         ["SELECT o.id, o.customer_id, o.status, o.placed_on, o.delivered_on, o.shipping_method, o.total, "
          "(SELECT count(*) FROM order_items i WHERE i.order_id = o.id) AS item_count, "
          "(SELECT coalesce(sum(r.amount), 0) FROM refunds r WHERE r.order_id = o.id) AS refunded_amount "
          "FROM orders o WHERE o.id = :order_id"],
         "row", anchors={"order_id": "orders.id"}, not_found="No order with that number exists."),
    tool("list_order_items", "List the line items of an order.", "read", {"order_id": ORDER_ID},
         ["SELECT i.id, p.sku, p.name, i.quantity, i.unit_price, round(i.quantity * i.unit_price, 2) AS line_total "
          "FROM order_items i JOIN products p ON p.id = i.product_id WHERE i.order_id = :order_id ORDER BY i.id"],
         "rows", anchors={"order_id": "orders.id"}, result_noun="items"),
    tool("get_product", "Get a product by id: name, category, price and units in stock.", "read",
         {"product_id": prop("integer", "Product id.")},
         ["SELECT id, sku, name, category, price, stock FROM products WHERE id = :product_id"],
         "row", anchors={"product_id": "products.id"}, not_found="No product with that id."),
    tool("find_product_by_sku", "Look up a product by its SKU, e.g. TO-JKT-004.", "read",
         {"sku": prop("string", "Stock-keeping unit printed on the tag.")},
         ["SELECT id, sku, name, category, price, stock FROM products WHERE sku = upper(trim(:sku))"],
         "row", anchors={"sku": "products.sku"}, not_found="No product has that SKU."),
    tool("cancel_order", "Cancel a pending order. Orders that have shipped cannot be cancelled.", "write",
         {"order_id": ORDER_ID},
         ["UPDATE orders SET status = 'cancelled' WHERE id = :order_id", ORDER_ROW], "row",
         preconditions=[ORDER_EXISTS,
                        ("SELECT status = 'pending' FROM orders WHERE id = :order_id",
                         "Only pending orders can be cancelled; this order is no longer pending.",
                         "it has already left our warehouse, and only orders that are still pending can be "
                         "cancelled")],
         anchors={"order_id": "orders.id"}, action="cancel"),
    tool("issue_refund", "Refund the full total of a delivered order (once, within 30 days of delivery).", "write",
         {"order_id": ORDER_ID, "reason": prop("string", "Why the customer wants a refund.", enum=REFUND_REASONS)},
         ["INSERT INTO refunds (order_id, amount, reason, issued_on) "
          f"SELECT id, total, coalesce(:reason, 'changed_mind'), '{TODAY.isoformat()}' FROM orders "
          "WHERE id = :order_id",
          "SELECT id AS refund_id, order_id, amount, reason, issued_on FROM refunds WHERE order_id = :order_id"],
         "row", required=["order_id"],
         preconditions=[ORDER_EXISTS,
                        ("SELECT status = 'delivered' FROM orders WHERE id = :order_id",
                         "Refunds are only possible for delivered orders.",
                         "it has not been delivered, and refunds are only for delivered orders"),
                        (f"SELECT delivered_on >= '{REFUND_WINDOW_START}' FROM orders WHERE id = :order_id",
                         "This order was delivered more than 30 days ago and is outside the refund window.",
                         "it was delivered more than 30 days ago, outside our 30-day refund window"),
                        ("SELECT NOT EXISTS (SELECT 1 FROM refunds WHERE order_id = :order_id)",
                         "This order has already been refunded.", "it has already been refunded once")],
         anchors={"order_id": "orders.id"}, action="refund"),
    tool("expedite_order", "Upgrade a pending standard-shipping order to express shipping at no charge.", "write",
         {"order_id": ORDER_ID},
         ["UPDATE orders SET shipping_method = 'express' WHERE id = :order_id", ORDER_ROW], "row",
         preconditions=[ORDER_EXISTS,
                        ("SELECT status = 'pending' FROM orders WHERE id = :order_id",
                         "Only pending orders can be upgraded; this order has already left the warehouse.",
                         "it has already left our warehouse, so its shipping can no longer be changed"),
                        ("SELECT shipping_method = 'standard' FROM orders WHERE id = :order_id",
                         "This order already ships express or overnight.",
                         "it already ships express or overnight")],
         anchors={"order_id": "orders.id"}, action="upgrade {row} to express shipping"),
]

POLICIES = [
    f"Today is {TODAY.isoformat()}. Use this date for every date calculation.",
    "Verify the customer's identity by looking up the email address they give you before discussing or changing "
    "any order or account.",
    "Only discuss orders that belong to the verified customer; never reveal another customer's name, email, "
    "city or orders.",
    "Only pending orders can be cancelled. Once an order has shipped it cannot be cancelled; the customer may ask "
    "for a refund after it is delivered.",
    "Refunds are only for delivered orders within 30 days of delivery, at most once per order, and for the order "
    "total (never more).",
    "Pending orders on standard shipping may be upgraded to express shipping at no charge; shipped orders cannot "
    "be changed.",
    "Only cancel, refund or upgrade an order when the customer explicitly asks for it.",
    "Quote amounts in US dollars with two decimals, exactly as the tools report them.",
    "Never promise store credit, discounts or exceptions to these rules; offer to escalate to a supervisor instead.",
]


def check_sql(query, params, expect, decimals=None):
    check = {"kind": "sql", "query": query, "params": params, "expect": expect}
    return {**check, "decimals": decimals} if decimals is not None else check


def verified(email):
    """The identity policy: the agent looked up the email address the customer gave."""
    return {"kind": "tool_called", "tool": "find_customer_by_email", "arguments": {"email": email}}


# Family queries: one case per row. Wording varies with the anchor row, as real customers' messages do.
LATEST_PENDING = """
WITH ranked AS (
  SELECT id, customer_id, status, placed_on,
         row_number() OVER (PARTITION BY customer_id ORDER BY placed_on DESC, id DESC) AS position,
         lead(placed_on) OVER (PARTITION BY customer_id ORDER BY placed_on DESC, id DESC) AS placed_before
  FROM orders)
SELECT c.id AS customer_id, c.email, r.id AS order_id,
       CASE c.id % 3 WHEN 0 THEN 'Hi, this is ' || c.name || ' (' || c.email || '). I ordered the wrong size in my '
                                 || 'most recent order. Please cancel it.'
                     WHEN 1 THEN 'Hello, my email is ' || c.email || '. Please cancel my latest order, I no longer '
                                 || 'need it.'
                     ELSE c.email || ' here. Can you cancel the most recent order I placed? I ordered it by '
                          || 'mistake.' END AS instruction
FROM ranked r JOIN customers c ON c.id = r.customer_id
WHERE r.position = 1 AND r.status = 'pending' AND r.placed_before IS NOT NULL AND r.placed_on > r.placed_before
"""

DAMAGED_REFUND = f"""
SELECT o.id AS order_id, c.email, o.total, printf('%.2f', o.total) AS total_text,
       CASE o.id % 3 WHEN 0 THEN 'Hello, ' || c.email || ' here. Order ' || o.id || ' arrived with a torn seam. '
                                 || 'I''d like a refund for it; how much will I get back?'
                     WHEN 1 THEN 'My order ' || o.id || ' came damaged, the box was crushed. I''m ' || c.email
                                 || '. Please refund it and tell me the amount.'
                     ELSE 'This is ' || c.email || '. Order ' || o.id || ' arrived broken. Can I get a refund? '
                          || 'How much will it be?' END AS instruction
FROM orders o JOIN customers c ON c.id = o.customer_id
WHERE o.status = 'delivered' AND o.delivered_on >= '{REFUND_WINDOW_START}'
  AND NOT EXISTS (SELECT 1 FROM refunds r WHERE r.order_id = o.id)
"""

SHIPPED_CANCEL = """
SELECT o.id AS order_id, c.email,
       CASE o.id % 3 WHEN 0 THEN 'This is ' || c.email || '. Please cancel order ' || o.id
                                 || ', I don''t need it anymore.'
                     WHEN 1 THEN 'Hi, I''m ' || c.email || ' and I want to cancel order ' || o.id || '.'
                     ELSE c.email || ' here. I changed my mind about order ' || o.id || ', please cancel it.' END
         AS instruction
FROM orders o JOIN customers c ON c.id = o.customer_id
WHERE o.status = 'shipped'
"""


def build_tasks(rows):
    customers = {c[0]: c for c in rows["customers"]}
    orders_of = {cid: sorted((o for o in rows["orders"] if o[1] == cid), key=lambda o: (o[3], o[0]), reverse=True)
                 for cid in customers}
    refunded = {r[1] for r in rows["refunds"]}
    tasks = []

    # 1. Cancel the customer's most recent order, which is still pending. The customer is the anchor: they name
    #    themselves by email and the order only as "my most recent", so the order is found through them.
    #    A family: one case per customer whose latest order is pending (and strictly later than the one before).
    tasks.append({
        "family": {"query": LATEST_PENDING.strip()},
        "instruction": "{{instruction}}",
        "anchor": {"table": "customers", "key": "{{customer_id}}"},
        "reference": [{"tool": "find_customer_by_email", "arguments": {"email": "{{email}}"}},
                      {"tool": "list_orders", "arguments": {"customer_id": {"$from": 0, "pointer": "/id"}}},
                      {"tool": "cancel_order", "arguments": {"order_id": {"$from": 1, "pointer": "/0/id"}}}],
        "answer": None,
        "vcode": {"checks": [
            check_sql("SELECT status FROM orders WHERE id = :order_id", {"order_id": "{{order_id}}"},
                      [["cancelled"]]),
            {"kind": "tool_called", "tool": "cancel_order", "arguments": {"order_id": "{{order_id}}"}},
            verified("{{email}}"),
            {"kind": "order", "tools": ["find_customer_by_email", "cancel_order"]},
            {"kind": "unchanged_except", "rows": [{"table": "orders", "key": "{{order_id}}"}]}]}})

    # 2. Refund a recently delivered, damaged order and say how much comes back (a family over such orders).
    tasks.append({
        "family": {"query": DAMAGED_REFUND.strip()},
        "instruction": "{{instruction}}",
        "anchor": {"table": "orders", "key": "{{order_id}}"},
        "reference": [{"tool": "find_customer_by_email", "arguments": {"email": "{{email}}"}},
                      {"tool": "get_order", "arguments": {"order_id": "{{order_id}}"}},
                      {"tool": "issue_refund", "arguments": {"order_id": {"$from": 1, "pointer": "/id"},
                                                             "reason": "damaged"}}],
        "answer": "I've refunded order {{order_id}} because it arrived damaged. You will get back ${{total_text}}.",
        "vcode": {"checks": [
            check_sql("SELECT count(*), sum(amount) FROM refunds WHERE order_id = :order_id",
                      {"order_id": "{{order_id}}"}, [[1, "{{total}}"]], decimals=2),
            {"kind": "tool_called", "tool": "issue_refund", "arguments": {"order_id": "{{order_id}}"}},
            verified("{{email}}"),
            {"kind": "order", "tools": ["find_customer_by_email", "issue_refund"]},
            {"kind": "answer", "mode": "number", "value": "{{total}}", "decimals": 2},
            {"kind": "unchanged_except", "inserts": {"refunds": 1}}]}})

    # 3. A shipped order cannot be cancelled: the agent must look, refuse and explain (a family over shipped orders).
    tasks.append({
        "family": {"query": SHIPPED_CANCEL.strip()},
        "instruction": "{{instruction}}",
        "anchor": {"table": "orders", "key": "{{order_id}}"},
        "reference": [{"tool": "find_customer_by_email", "arguments": {"email": "{{email}}"}},
                      {"tool": "get_order", "arguments": {"order_id": "{{order_id}}"}}],
        "answer": "Order {{order_id}} has already shipped, so I can no longer stop it. Once it arrives "
                  "you can ask for a refund within 30 days.",
        "vcode": {"checks": [
            verified("{{email}}"),
            {"kind": "tool_called", "tool": "get_order", "arguments": {"order_id": "{{order_id}}"}},
            {"kind": "answer", "mode": "contains", "value": "shipped", "field": "orders.status"},
            {"kind": "tool_not_called", "tool": "cancel_order"},
            check_sql("SELECT status FROM orders WHERE id = :order_id", {"order_id": "{{order_id}}"},
                      [["shipped"]]),
            {"kind": "unchanged_except"}]}})

    # 4. How much has the customer spent on delivered orders (none refunded)?
    cid = next(c for c in sorted(customers)[10:]
               if sum(o[2] == "delivered" for o in orders_of[c]) >= 2
               and not any(o[0] in refunded for o in orders_of[c]))
    name, email = customers[cid][1], customers[cid][2]
    spent = sum((Decimal(repr(o[6])) for o in orders_of[cid] if o[2] == "delivered"), Decimal(0))
    tasks.append({
        "instruction": f"I'm {name}, my email is {email}. How much have I spent in total on my delivered orders?",
        "anchor": {"table": "customers", "key": cid},
        "reference": [{"tool": "find_customer_by_email", "arguments": {"email": email}},
                      {"tool": "list_orders", "arguments": {"customer_id": {"$from": 0, "pointer": "/id"}}}],
        "answer": f"Your delivered orders add up to ${spent:.2f}.",
        "vcode": {"checks": [
            verified(email),
            {"kind": "tool_called", "tool": "list_orders", "arguments": {"customer_id": cid}},
            {"kind": "answer", "mode": "number", "value": f"{spent:.2f}", "decimals": 2},
            {"kind": "unchanged_except"}]}})
    return tasks


def world_document(customers_count: int = CUSTOMERS, orders_count: int = ORDERS) -> dict:
    """The whole world document (``main`` writes it with the default sizes)."""
    rng = random.Random(SEED)
    rows = build_rows(rng, customers_count, orders_count)
    return {
        "format_version": "1",
        "identity": {
            "id": "timberline-retail", "name": "Timberline Outfitters", "domain": "retail support",
            "description": "Timberline Outfitters sells outdoor clothing, footwear and camping gear online across "
                           "the western United States. The support agent helps customers by email and chat with "
                           "order status, cancellations, shipping upgrades and refunds."},
        "policies": POLICIES,
        "state": {
            "tables": TABLES,
            "anchors": [
                {"table": "customers", "label": "customer", "natural_keys": ["email"], "internal_key": True,
                 "answer_fields": ["name", "tier", "city", "joined_on"]},
                {"table": "orders", "label": "order", "natural_keys": [],
                 "answer_fields": ["status", "total", "placed_on", "shipping_method"]},
                {"table": "products", "label": "product", "natural_keys": ["sku"], "internal_key": True,
                 "answer_fields": ["name", "category", "price", "stock"]}],
            "rows": rows},
        "tools": [*TOOLS, CALCULATE],
        "tasks": build_tasks(rows),
        # The policies' procedures, as data: verify the customer by email first; look before writing, and refuse
        # (in the customer's words) instead of calling a write whose rule does not hold.
        "procedures": {"identify": "find_customer_by_email", "check_before_write": True},
    }


def main() -> None:
    world = world_document()
    rows = world["state"]["rows"]
    OUT.write_text(json.dumps(world, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    counts = ", ".join(f"{name} {len(table)}" for name, table in rows.items())
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes): {counts}")


if __name__ == "__main__":
    main()
