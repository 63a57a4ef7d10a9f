"""Generate examples/airline_desk/world.json: the customer service desk of Northwind Air.

The third example world, in a domain the other two do not cover, and the one that uses the
format's real-world constructs: composite primary keys (a booking's legs are keyed by booking and
position, flights by number and date), a list argument read with ``json_each`` (cancel several
legs at once), a JSON column (each leg's seat, meal and bags), a pure hand-off tool
(``transfer_to_human_agents``), declared constraints (column defaults, table CHECKs, an index) and
writes the customer must confirm before they happen (``confirm``: a scripted "yes" turn).

Deterministic: every random choice comes from ``random.Random(SEED)``, so running this
script twice writes byte-identical output. Run with ``python examples/airline_desk/generate.py``.
"""

from __future__ import annotations

import json
import random
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

SEED = 20260504
TODAY = date(2026, 5, 4)
OUT = Path(__file__).with_name("world.json")

FIRST = ["Amelia", "Bastien", "Carmen", "Desmond", "Elif", "Florian", "Gwen", "Hector", "Ilse", "Jamal", "Katya",
         "Lorenzo", "Mirela", "Nico", "Orla", "Paulo", "Rhea", "Stellan", "Tomasz", "Ursula", "Vikram", "Wanda",
         "Yannick", "Zuri", "Anika", "Boris", "Cleo", "Dario", "Eamon", "Fiona"]
LAST = ["Achterberg", "Brandt", "Cardoso", "Dlamini", "Eklund", "Fairweather", "Grimaldi", "Halvorsen", "Ishikawa",
        "Janssen", "Kovac", "Lachance", "Moreno", "Nyberg", "Oduya", "Pellegrini", "Quispe", "Rasmussen", "Sandoval",
        "Tanner", "Uribe", "Vance", "Whitfield", "Yoshida", "Zamora"]
MAIL_DOMAINS = ["gmail.com", "outlook.com", "icloud.com", "proton.me"]
AIRPORTS = ["SFO", "LAX", "SEA", "DEN", "ORD", "JFK", "BOS", "AUS", "ATL", "MIA", "PHX", "PDX"]
MEALS = ["vegetarian", "vegan", "kosher", "halal", "standard"]  # minting draws the first
CABINS = {"economy": Decimal("1.00"), "premium": Decimal("1.60"), "business": Decimal("2.80")}
HANDOFF_REASONS = ["compensation", "rebooking", "fare_refund", "other"]
LOCATOR = "ABCDEFGHJKLMNPQRSTUVWXYZ"  # record locators are letters only (no digits a number check could misread)
CUSTOMERS, FLIGHT_NUMBERS, BOOKINGS = 640, 80, 1300
"""The world's size: enough customers that ``--eval-cases 20`` holds out over 100 of them (issue 29)."""
FIRST_SIZE = (150, 60, 320)
"""The size the world had first (customers, flight numbers, bookings): ``world_document(*FIRST_SIZE)`` is that
world byte for byte, the one the handed evidence's trajectories were recorded on."""


def col(name, type_, *, pk=False, not_null=False, unique=False, references=None, decimals=None, default=None,
        json_data=False, label=None):
    column = {"name": name, "type": type_, "primary_key": pk, "not_null": not_null, "unique": unique,
              "references": references}
    if decimals is not None:  # every amount of this world is US dollars, quoted with two decimals
        column.update(decimals=decimals, currency="$")
    if label:
        column["label"] = label
    if default is not None:
        column["default"] = default
    if json_data:
        column["json_data"] = True
    return column


TABLES = [
    {"name": "customers", "columns": [
        col("id", "INTEGER", pk=True), col("name", "TEXT", not_null=True),
        col("email", "TEXT", not_null=True, unique=True),
        col("tier", "TEXT", not_null=True, default="member")],
     "checks": ["tier IN ('member', 'silver', 'gold')"]},
    {"name": "flights", "columns": [
        col("flight_no", "TEXT", pk=True, label="flight number"), col("flight_date", "TEXT", pk=True, label="date"),
        col("origin", "TEXT", not_null=True), col("destination", "TEXT", not_null=True),
        col("departs", "TEXT", not_null=True, label="departure time"),
        col("status", "TEXT", not_null=True, default="scheduled"),
        col("seats_left", "INTEGER", not_null=True, label="number of seats left"),
        col("fare", "REAL", not_null=True, decimals=2)],
     "checks": ["seats_left >= 0", "status IN ('scheduled', 'delayed', 'cancelled', 'departed')",
                "origin <> destination"]},
    {"name": "bookings", "columns": [
        col("id", "TEXT", pk=True), col("customer_id", "INTEGER", not_null=True, references="customers.id"),
        col("status", "TEXT", not_null=True, default="confirmed"), col("cabin", "TEXT", not_null=True),
        col("booked_on", "TEXT", not_null=True, label="booking date"), col("total", "REAL", not_null=True, decimals=2)],
     "checks": ["status IN ('confirmed', 'cancelled')", "cabin IN ('economy', 'premium', 'business')"]},
    {"name": "booking_legs", "columns": [
        col("booking_id", "TEXT", pk=True, references="bookings.id"), col("position", "INTEGER", pk=True),
        col("flight_no", "TEXT", not_null=True), col("flight_date", "TEXT", not_null=True),
        col("status", "TEXT", not_null=True, default="confirmed"),
        col("extras", "TEXT", not_null=True, default="{}", json_data=True)],
     "checks": ["status IN ('confirmed', 'cancelled', 'flown')", "position >= 1"]},
]
NOTHING_FLOWN = "NOT EXISTS (SELECT 1 FROM booking_legs WHERE booking_id = :booking_id AND status = 'flown')"
"""No leg of the booking has been flown: cancel_booking's precondition and get_booking's ``not_yet_flown`` are this
one expression, so a decision to cancel restates the value it depends on (``world_format.result_columns``)."""
INDEXES = [{"name": "legs_by_flight", "table": "booking_legs", "columns": ["flight_no", "flight_date"]}]


def build_rows(rng: random.Random, customer_count: int = CUSTOMERS, flight_numbers: int = FLIGHT_NUMBERS,
               booking_count: int = BOOKINGS) -> dict[str, list[list]]:
    names = rng.sample([(f, s) for f in FIRST for s in LAST], customer_count)
    customers = []
    for index, (first, last) in enumerate(names):
        email = f"{first}.{last}@{rng.choice(MAIL_DOMAINS)}".lower()
        customers.append([3001 + index, f"{first} {last}", email,
                          rng.choices(["member", "silver", "gold"], [70, 20, 10])[0]])

    flights = []
    for number in range(flight_numbers):
        origin, destination = rng.sample(AIRPORTS, 2)
        departs = f"{rng.randint(6, 21):02d}:{rng.choice(['00', '15', '30', '45'])}"
        fare = Decimal(rng.randint(8900, 42900)) / 100
        for offset in sorted(rng.sample(range(-12, 25), 4)):
            flown = offset < 0
            status = "departed" if flown else rng.choices(["scheduled", "delayed", "cancelled"], [82, 11, 7])[0]
            flights.append([f"NW{120 + number}", (TODAY + timedelta(days=offset)).isoformat(), origin, destination,
                            departs, status, rng.randint(0, 40), float(fare)])

    by_date = sorted(flights, key=lambda f: (f[1], f[0]))
    bookings, legs, seat_rows = [], [], "ABCDEF"
    used: set[str] = set()
    for _ in range(booking_count):
        locator = "".join(rng.choice(LOCATOR) for _ in range(6))
        while locator in used:
            locator = "".join(rng.choice(LOCATOR) for _ in range(6))
        used.add(locator)
        count = rng.choices([1, 2, 3, 4], [30, 40, 20, 10])[0]
        chosen = sorted(rng.sample(by_date, count), key=lambda f: (f[1], f[4], f[0]))
        cabin = rng.choices(list(CABINS), [75, 15, 10])[0]
        cancelled = rng.random() < 0.1
        total = sum((Decimal(repr(f[7])) * CABINS[cabin] for f in chosen), Decimal(0)).quantize(Decimal("0.01"))
        booked = date.fromisoformat(chosen[0][1]) - timedelta(days=rng.randint(3, 90))
        bookings.append([locator, rng.choice(customers)[0], "cancelled" if cancelled else "confirmed", cabin,
                         booked.isoformat(), float(total)])
        for position, flight in enumerate(chosen, start=1):
            status = "cancelled" if cancelled else ("flown" if flight[5] == "departed" else "confirmed")
            extras = {"bags": rng.choices([0, 1, 2], [35, 50, 15])[0],
                      "meal": rng.choices(MEALS, [8, 4, 2, 2, 84])[0],
                      "seat": f"{rng.randint(3, 38)}{rng.choice(seat_rows)}"}
            legs.append([locator, position, flight[0], flight[1], status,
                         json.dumps(extras, sort_keys=True, separators=(",", ":"))])
    bookings.sort(key=lambda b: b[0])
    legs.sort(key=lambda leg: (leg[0], leg[1]))
    return {"customers": customers, "flights": flights, "bookings": bookings, "booking_legs": legs}


def prop(type_, description, **extra):
    return {"type": type_, "description": description, **extra}


def tool(name, description, effect, properties, statements, shape, *, preconditions=(), anchors=None,
         not_found=None, result_noun=None, action=None, confirm=False, message=None):
    result = {"shape": shape}
    if not_found:
        result["not_found"] = not_found
    if message:
        result["message"] = message
    spec = {"name": name, "description": description, "effect": effect, "statements": list(statements),
            "parameters": {"type": "object", "properties": properties, "additionalProperties": False,
                           "required": list(properties)},
            "preconditions": [{"sql": sql, "error": error, **({"explanation": why[0]} if why else {})}
                              for sql, error, *why in preconditions],
            "result": result, "anchors": anchors or {}}
    for key, value in (("result_noun", result_noun), ("action", action), ("confirm", confirm)):
        if value:
            spec[key] = value
    return spec


BOOKING_ID = prop("string", "Six-letter booking reference (record locator), e.g. KXTRAB.", pattern="^[A-Z]{6}$")
POSITION = prop("integer", "Position of the leg in the booking, 1 for the first flight.", minimum=1)
FLIGHT_NO = prop("string", "Flight number, e.g. NW134.")
FLIGHT_DATE = prop("string", "Date of the flight, YYYY-MM-DD.", pattern=r"^\d{4}-\d{2}-\d{2}$")
BOOKING_EXISTS = ("SELECT EXISTS (SELECT 1 FROM bookings WHERE id = :booking_id)", "No booking has that reference.")
BOOKING_OPEN = ("SELECT status = 'confirmed' FROM bookings WHERE id = :booking_id",
                "This booking has already been cancelled.", "it has already been cancelled")
CHOSEN = "position IN (SELECT value FROM json_each(:positions))"
LEGS_OF_BOOKING = ("SELECT l.position, l.flight_no, l.flight_date, f.origin, f.destination, f.departs, l.status, "
                   "f.status AS flight_status, l.extras FROM booking_legs l JOIN flights f "
                   "ON f.flight_no = l.flight_no AND f.flight_date = l.flight_date WHERE l.booking_id = :booking_id "
                   "ORDER BY l.position")
SEAT_BACK = ("UPDATE flights SET seats_left = seats_left + 1 WHERE (flight_no, flight_date) IN (SELECT flight_no, "
             "flight_date FROM booking_legs WHERE booking_id = :booking_id AND status = 'confirmed'{only})")

CALCULATE = {"name": "calculate", "effect": "none", "builtin": "calculate", "result": {"shape": "recorded"},
             "description": "Work out arithmetic: add up listed amounts (e.g. 12.5 + 30 + 7.25), or count listed "
                            "items by adding 1 per item (1 + 1 + 1).",
             "parameters": {"type": "object", "additionalProperties": False, "required": ["expression"],
                            "properties": {"expression": {"type": "string", "maxLength": 500,
                                                          "description": "Numbers with + - * / and parentheses."}}}}
"""The desk's calculator (the ``calculate`` built-in): aggregate answers quote its result."""

TOOLS = [
    tool("find_customer_by_email", "Look up a customer by email address (use it to verify identity).", "read",
         {"email": prop("string", "The customer's email address.")},
         ["SELECT id, name, email, tier FROM customers WHERE email = lower(trim(:email))"], "row",
         anchors={"email": "customers.email"}, not_found="No customer uses that email address."),
    tool("get_customer", "Get a customer by id.", "read", {"customer_id": prop("integer", "Customer id.")},
         ["SELECT id, name, email, tier FROM customers WHERE id = :customer_id"], "row",
         anchors={"customer_id": "customers.id"}, not_found="No customer with that id."),
    tool("list_bookings", "List a customer's bookings, most recent first.", "read",
         {"customer_id": prop("integer", "Customer id as returned by find_customer_by_email.")},
         ["SELECT id, status, cabin, booked_on, total FROM bookings WHERE customer_id = :customer_id "
          "ORDER BY booked_on DESC, id"], "rows", anchors={"customer_id": "customers.id"}, result_noun="bookings"),
    tool("get_booking", "Get one booking with its number of legs and whether none of them has been flown yet.",
         "read", {"booking_id": BOOKING_ID},
         ["SELECT b.id, b.customer_id, b.status, b.cabin, b.booked_on, b.total, "
          "(SELECT count(*) FROM booking_legs l WHERE l.booking_id = b.id) AS legs, "
          f"{NOTHING_FLOWN} AS not_yet_flown FROM bookings b WHERE b.id = :booking_id"], "row",
         anchors={"booking_id": "bookings.id"},
         not_found="No booking has that reference."),
    tool("list_legs", "List the legs (flights) of a booking in order, with seat, meal and bags, and whether the "
         "airline still operates each flight (flight_status).", "read",
         {"booking_id": BOOKING_ID}, [LEGS_OF_BOOKING], "rows", anchors={"booking_id": "bookings.id"},
         result_noun="legs"),
    tool("get_leg", "Get one leg of a booking by its position.", "read",
         {"booking_id": BOOKING_ID, "position": POSITION},
         ["SELECT booking_id, position, flight_no, flight_date, status, extras FROM booking_legs "
          "WHERE booking_id = :booking_id AND position = :position"], "row",
         anchors={"booking_id": "booking_legs.booking_id", "position": "booking_legs.position"},
         not_found="That booking has no leg at that position."),
    tool("find_leg", "Find the leg of a booking that flies a flight on a date: its position in the booking, "
         "status, seat, meal and bags, and whether the airline still operates the flight (flight_status).", "read",
         {"booking_id": BOOKING_ID, "flight_no": FLIGHT_NO, "flight_date": FLIGHT_DATE},
         ["SELECT l.booking_id, l.position, l.flight_no, l.flight_date, l.status, f.status AS flight_status, "
          "l.extras FROM booking_legs l JOIN flights f ON f.flight_no = l.flight_no AND f.flight_date = "
          "l.flight_date WHERE l.booking_id = :booking_id AND l.flight_no = upper(trim(:flight_no)) AND "
          "l.flight_date = :flight_date"], "row",
         anchors={"booking_id": "booking_legs.booking_id", "flight_no": "booking_legs.flight_no",
                  "flight_date": "booking_legs.flight_date"},
         not_found="That booking has no leg on that flight and date."),
    tool("get_flight", "Get a flight on a date: route, departure time, status, seats left and fare.", "read",
         {"flight_no": FLIGHT_NO, "flight_date": FLIGHT_DATE},
         ["SELECT flight_no, flight_date, origin, destination, departs, status, seats_left, fare FROM flights "
          "WHERE flight_no = upper(trim(:flight_no)) AND flight_date = :flight_date"], "row",
         anchors={"flight_no": "flights.flight_no", "flight_date": "flights.flight_date"},
         not_found="No such flight on that date."),
    tool("cancel_legs", "Cancel some legs of a booking (by position); their seats are released. The booking is "
         "cancelled when no leg is left.", "write",
         {"booking_id": BOOKING_ID,
          "positions": prop("array", "Positions of the legs to cancel.", items={"type": "integer", "minimum": 1},
                            minItems=1, uniqueItems=True)},
         [SEAT_BACK.format(only=f" AND {CHOSEN}"),
          f"UPDATE booking_legs SET status = 'cancelled' WHERE booking_id = :booking_id AND {CHOSEN}",
          "UPDATE bookings SET status = 'cancelled' WHERE id = :booking_id AND NOT EXISTS (SELECT 1 FROM "
          "booking_legs WHERE booking_id = :booking_id AND status <> 'cancelled')",
          "SELECT position, flight_no, flight_date, status FROM booking_legs WHERE booking_id = :booking_id "
          "ORDER BY position"], "rows",
         preconditions=[BOOKING_EXISTS, BOOKING_OPEN,
                        ("SELECT NOT EXISTS (SELECT 1 FROM json_each(:positions) p WHERE NOT EXISTS (SELECT 1 FROM "
                         "booking_legs l WHERE l.booking_id = :booking_id AND l.position = p.value))",
                         "The booking has no leg at one of those positions."),
                        ("SELECT NOT EXISTS (SELECT 1 FROM booking_legs WHERE booking_id = :booking_id AND "
                         f"{CHOSEN} AND status <> 'confirmed')",
                         "Only legs that are still confirmed (not flown or already cancelled) can be cancelled.")],
         # the legs are named by their flights and dates in the family's own question (its turn's "confirms")
         action="cancel flights", confirm={"states": ["booking_id"]}),
    tool("cancel_booking", "Cancel a whole booking; every seat is released. Not possible once a leg has been "
         "flown.", "write", {"booking_id": BOOKING_ID},
         [SEAT_BACK.format(only=""),
          "UPDATE booking_legs SET status = 'cancelled' WHERE booking_id = :booking_id",
          "UPDATE bookings SET status = 'cancelled' WHERE id = :booking_id",
          "SELECT id, status, cabin, booked_on, total FROM bookings WHERE id = :booking_id"], "row",
         preconditions=[BOOKING_EXISTS, BOOKING_OPEN,
                        (f"SELECT {NOTHING_FLOWN}",
                         "Part of this booking has already been flown, so it cannot be cancelled as a whole.",
                         "part of it has already been flown, so it cannot be cancelled as a whole")],
         # the question names the booking and the total the cancellation releases
         anchors={"booking_id": "bookings.id"}, action="cancel", confirm={"states": ["booking_id", "bookings.total"]}),
    tool("set_meal", "Change the meal ordered on one leg of a booking.", "write",
         {"booking_id": BOOKING_ID, "position": POSITION,
          "meal": prop("string", "The meal to serve.", enum=MEALS)},
         ["UPDATE booking_legs SET extras = json_set(extras, '$.meal', :meal) "
          "WHERE booking_id = :booking_id AND position = :position",
          "SELECT booking_id, position, flight_no, flight_date, status, extras FROM booking_legs "
          "WHERE booking_id = :booking_id AND position = :position"], "row",
         preconditions=[("SELECT EXISTS (SELECT 1 FROM booking_legs WHERE booking_id = :booking_id AND "
                         "position = :position)", "That booking has no leg at that position."),
                        ("SELECT status = 'confirmed' FROM booking_legs WHERE booking_id = :booking_id AND "
                         "position = :position", "Meals can only be changed on confirmed flights not yet flown.",
                         "that flight is no longer confirmed, and meals can only be changed on confirmed flights"),
                        ("SELECT json_extract(extras, '$.meal') <> :meal FROM booking_legs WHERE "
                         "booking_id = :booking_id AND position = :position", "That meal is already ordered.",
                         "it already has that meal")],
         anchors={"booking_id": "booking_legs.booking_id", "position": "booking_legs.position"},
         action="change the meal on {row} to {meal}"),
    tool("transfer_to_human_agents", "Hand the conversation to a human agent, with a one-sentence summary of what "
         "the customer needs. Use it for requests the policies do not let you handle.", "none",
         {"reason": prop("string", "What the customer asks for.", enum=HANDOFF_REASONS),
          "booking_id": BOOKING_ID,
          "summary": prop("string", "What the customer needs, in one sentence.", minLength=1, maxLength=500)},
         [], "recorded", message="A human agent will take over this conversation.",
         anchors={"booking_id": "bookings.id"}),
]

HANDOFF = {"tool": "transfer_to_human_agents", "arguments": {"reason": "compensation"},
           "when": ["My flight on {row} was delayed for hours and I want compensation.",
                    "I'd like compensation for the cancelled connection on {row}.",
                    "What compensation do I get for the delay on {row}?"],
           "message": "I have handed your request to a human agent, who will take over this conversation; I can't "
                      "promise compensation myself."}
"""The policies' hand-off, as data: compensation requests go to a human with the booking and a summary."""

POLICIES = [
    f"Today is {TODAY.isoformat()}. Use this date for every date calculation.",
    "Verify the customer's identity by looking up the email address they give you before discussing or changing "
    "any booking.",
    "Only discuss bookings that belong to the verified customer; never reveal another customer's details.",
    "Legs (flights) of a booking can be cancelled one by one while they are confirmed. Flown legs cannot be "
    "cancelled, and a booking with a flown leg cannot be cancelled as a whole.",
    f"Meals can be changed on confirmed legs; the choices are {', '.join(MEALS)}.",
    "Requests for compensation, rebooking or refunds of fares go to a human agent: call transfer_to_human_agents "
    "with the reason, the booking and a one-sentence summary, and tell the customer a human agent will take over. "
    "Never promise compensation.",
    "Quote amounts in US dollars with two decimals, exactly as the tools report them.",
]


def verified(email):
    """The identity policy: the agent looked up the email address the customer gave."""
    return {"kind": "tool_called", "tool": "find_customer_by_email", "arguments": {"email": email}}


def leg_lookup(flight_no, flight_date):
    """A find_leg step of the booking's family row: the leg the customer names by its flight and date."""
    return {"tool": "find_leg", "arguments": {"booking_id": "{{booking_id}}", "flight_no": flight_no,
                                              "flight_date": flight_date}}


def leg_key(booking, position):
    return {"table": "booking_legs", "key": {"booking_id": booking, "position": position}}


# Family queries: one case per row. Wording varies with the anchor row, as real customers' messages do.
TWO_LEGS = """
SELECT b.id AS booking_id, c.email, l1.position AS p1, l2.position AS p2, l1.flight_no AS f1, l1.flight_date AS d1,
       l2.flight_no AS f2, l2.flight_date AS d2,
       CASE c.id % 3 WHEN 0 THEN 'Hi, this is ' || c.email || '. On booking ' || b.id || ' please cancel flights '
                                 || l1.flight_no || ' on ' || l1.flight_date || ' and ' || l2.flight_no || ' on '
                                 || l2.flight_date || '.'
                     WHEN 1 THEN 'I''m ' || c.email || '. My plans changed: I no longer need ' || l1.flight_no
                                 || ' (' || l1.flight_date || ') or ' || l2.flight_no || ' (' || l2.flight_date
                                 || ') on booking ' || b.id || '. Please cancel them.'
                     ELSE c.email || ' here. Can you drop ' || l1.flight_no || ' on ' || l1.flight_date || ' and '
                          || l2.flight_no || ' on ' || l2.flight_date || ' from my booking ' || b.id || '?' END
         AS instruction
FROM bookings b JOIN customers c ON c.id = b.customer_id
JOIN booking_legs l1 ON l1.booking_id = b.id
JOIN booking_legs l2 ON l2.booking_id = b.id AND l2.position = l1.position + 1
WHERE b.status = 'confirmed' AND l1.status = 'confirmed' AND l2.status = 'confirmed'
  AND l1.position = (SELECT min(position) FROM booking_legs WHERE booking_id = b.id AND status = 'confirmed')
"""

MEAL_CHANGE = """
SELECT l.booking_id, l.position, l.flight_no, l.flight_date, c.email,
       CASE WHEN json_extract(l.extras, '$.meal') = 'vegan' THEN 'kosher' ELSE 'vegan' END AS meal,
       CASE (c.id + l.position) % 2
         WHEN 0 THEN 'Hello, ' || c.email || ' here. For flight ' || l.flight_no || ' on ' || l.flight_date
                     || ' (booking ' || l.booking_id || ') I would like a '
                     || CASE WHEN json_extract(l.extras, '$.meal') = 'vegan' THEN 'kosher' ELSE 'vegan' END
                     || ' meal, please.'
         ELSE 'I''m ' || c.email || '. Please change my meal on ' || l.flight_no || ', ' || l.flight_date
              || ', booking ' || l.booking_id || ', to '
              || CASE WHEN json_extract(l.extras, '$.meal') = 'vegan' THEN 'kosher' ELSE 'vegan' END || '.' END
         AS instruction
FROM booking_legs l JOIN bookings b ON b.id = l.booking_id JOIN customers c ON c.id = b.customer_id
WHERE l.status = 'confirmed'
"""

COMPENSATION = """
SELECT f.flight_no, f.flight_date, c.email, l.booking_id,
       CASE c.id % 2 WHEN 0 THEN 'My flight ' || f.flight_no || ' on ' || f.flight_date || ' (booking '
                                 || l.booking_id || ') was cancelled and I want compensation. I''m ' || c.email || '.'
                     ELSE 'This is ' || c.email || '. ' || f.flight_no || ' on ' || f.flight_date || ' got '
                          || 'cancelled on me, booking ' || l.booking_id || '. What compensation do I get?'
       END AS instruction
FROM flights f JOIN booking_legs l ON l.flight_no = f.flight_no AND l.flight_date = f.flight_date
JOIN bookings b ON b.id = l.booking_id JOIN customers c ON c.id = b.customer_id
WHERE f.status = 'cancelled' AND l.status = 'confirmed'
  AND (SELECT count(*) FROM booking_legs l2 JOIN bookings b2 ON b2.id = l2.booking_id
       WHERE l2.flight_no = f.flight_no AND l2.flight_date = f.flight_date AND b2.customer_id = c.id) = 1
"""

FLOWN_CANCEL = """
SELECT b.id AS booking_id, c.email,
       CASE c.id % 2 WHEN 0 THEN 'Please cancel booking ' || b.id || '. My email is ' || c.email || '.'
                     ELSE 'Hi, ' || c.email || ' here. I want to cancel my booking ' || b.id || ' entirely.' END
         AS instruction
FROM bookings b JOIN customers c ON c.id = b.customer_id
WHERE b.status = 'confirmed' AND EXISTS (SELECT 1 FROM booking_legs l WHERE l.booking_id = b.id AND l.status = 'flown')
  AND EXISTS (SELECT 1 FROM booking_legs l WHERE l.booking_id = b.id AND l.status = 'confirmed')
"""

BAGS = """
SELECT b.id AS booking_id, c.email, sum(json_extract(l.extras, '$.bags')) AS bags,
       sum(json_extract(l.extras, '$.bags')) || CASE sum(json_extract(l.extras, '$.bags')) WHEN 1 THEN ' checked bag'
                                                   ELSE ' checked bags' END AS bags_text,
       (SELECT group_concat(bags, ' + ') FROM (SELECT json_extract(l2.extras, '$.bags') AS bags FROM booking_legs l2
         WHERE l2.booking_id = b.id AND l2.status <> 'cancelled' ORDER BY l2.position)) AS bags_sum,
       CASE c.id % 2 WHEN 0 THEN 'How many checked bags are on booking ' || b.id || ' in total? I''m ' || c.email
                                 || '.'
                     ELSE c.email || ' here. Across all flights of booking ' || b.id || ', how many bags have I '
                          || 'checked?' END AS instruction
FROM bookings b JOIN customers c ON c.id = b.customer_id JOIN booking_legs l ON l.booking_id = b.id
WHERE b.status = 'confirmed' AND l.status <> 'cancelled'
GROUP BY b.id HAVING count(*) >= 2
"""


def build_tasks():
    confirm = {"after_step": 3,
               "assistant": "On booking {{booking_id}} I will cancel {{f1}} on {{d1}} and {{f2}} on {{d2}}; their "
                            "seats will be released. Shall I go ahead?",
               "user": "Yes, please cancel both.",
               "confirms": {"tool": "cancel_legs",
                            "states": ["{{booking_id}}", "{{f1}}", "{{d1}}", "{{f2}}", "{{d2}}"]}}
    return [
        # 1. Cancel two legs at once (a list argument), only after the customer's explicit yes. Each leg the
        #    customer names by flight and date is found with find_leg, whose one row gives its position.
        {"family": {"query": TWO_LEGS.strip()},
         "instruction": "{{instruction}}",
         "anchor": {"table": "bookings", "key": "{{booking_id}}"},
         "turns": [confirm],
         "reference": [{"tool": "find_customer_by_email", "arguments": {"email": "{{email}}"}},
                       leg_lookup("{{f1}}", "{{d1}}"), leg_lookup("{{f2}}", "{{d2}}"),
                       {"tool": "cancel_legs", "arguments": {"booking_id": "{{booking_id}}",
                                                             "positions": ["{{p1}}", "{{p2}}"]}}],
         "answer": "Done: {{f1}} on {{d1}} and {{f2}} on {{d2}} are cancelled on booking {{booking_id}}, and their "
                   "seats are released.",
         "vcode": {"checks": [
             verified("{{email}}"),
             # each leg cancelled was looked up by the flight and date the customer named
             {"kind": "tool_called", **leg_lookup("{{f1}}", "{{d1}}")},
             {"kind": "tool_called", **leg_lookup("{{f2}}", "{{d2}}")},
             {"kind": "tool_called", "tool": "cancel_legs", "list_match": "multiset",
              "arguments": {"booking_id": "{{booking_id}}", "positions": ["{{p1}}", "{{p2}}"]}},
             {"kind": "sql", "query": "SELECT position, status FROM booking_legs WHERE booking_id = :b AND "
                                      "position IN (:p1, :p2) ORDER BY position",
              "params": {"b": "{{booking_id}}", "p1": "{{p1}}", "p2": "{{p2}}"},
              "expect": [["{{p1}}", "cancelled"], ["{{p2}}", "cancelled"]]},
             {"kind": "after_turn", "tool": "cancel_legs", "turn": 0},
             {"kind": "tool_not_called", "tool": "cancel_booking"},
             {"kind": "order", "tools": ["find_customer_by_email", "cancel_legs"]},
             {"kind": "unchanged_except", "rows": [
                 leg_key("{{booking_id}}", "{{p1}}"), leg_key("{{booking_id}}", "{{p2}}"),
                 {"table": "flights", "key": {"flight_no": "{{f1}}", "flight_date": "{{d1}}"}},
                 {"table": "flights", "key": {"flight_no": "{{f2}}", "flight_date": "{{d2}}"}},
                 {"table": "bookings", "key": "{{booking_id}}"}]}]}},
        # 2. Change the meal of one leg: a write into a JSON column of a composite-key row. The leg named by flight
        #    and date is found with find_leg; the call first restates the leg's status it depends on, as the minted
        #    set_meal decisions do.
        {"family": {"query": MEAL_CHANGE.strip()},
         "instruction": "{{instruction}}",
         "anchor": {"table": "booking_legs", "key": {"booking_id": "{{booking_id}}", "position": "{{position}}"}},
         "reference": [{"tool": "find_customer_by_email", "arguments": {"email": "{{email}}"}},
                       leg_lookup("{{flight_no}}", "{{flight_date}}"),
                       {"tool": "set_meal", "arguments": {"booking_id": "{{booking_id}}", "position": "{{position}}",
                                                          "meal": "{{meal}}"},
                        "say": "Your leg {{position}} of booking {{booking_id}} has status confirmed."}],
         "answer": "Your meal on {{flight_no}} on {{flight_date}} is now {{meal}}.",
         "vcode": {"checks": [
             verified("{{email}}"),
             {"kind": "tool_called", "tool": "set_meal",
              "arguments": {"booking_id": "{{booking_id}}", "position": "{{position}}", "meal": "{{meal}}"}},
             {"kind": "json_value", "table": "booking_legs",
              "key": {"booking_id": "{{booking_id}}", "position": "{{position}}"}, "column": "extras",
              "pointer": "/meal", "value": "{{meal}}"},
             {"kind": "order", "tools": ["find_customer_by_email", "set_meal"]},
             {"kind": "unchanged_except", "rows": [leg_key("{{booking_id}}", "{{position}}")]}]}},
        # 3. Compensation is not the agent's to give: look up the flight's leg, then hand off to a human (a pure
        #    tool). A request naming a flight of a booking is looked up with find_leg, as a meal change or a
        #    cancellation of legs naming their flights is: one look-up for one kind of request.
        {"family": {"query": COMPENSATION.strip()},
         "instruction": "{{instruction}}",
         "anchor": {"table": "flights", "key": {"flight_no": "{{flight_no}}", "flight_date": "{{flight_date}}"}},
         "reference": [{"tool": "find_customer_by_email", "arguments": {"email": "{{email}}"}},
                       leg_lookup("{{flight_no}}", "{{flight_date}}"),
                       {"tool": "transfer_to_human_agents",
                        "arguments": {"reason": "compensation", "booking_id": "{{booking_id}}",
                                      "summary": "{{email}} asks for compensation for cancelled flight {{flight_no}} "
                                                 "on {{flight_date}} (booking {{booking_id}})."}}],
         "answer": "I'm sorry {{flight_no}} was cancelled. I have passed your compensation request to a human agent, "
                   "who will take over this conversation.",
         "vcode": {"checks": [
             verified("{{email}}"),
             {"kind": "tool_called", "tool": "find_leg", "arguments": {"booking_id": "{{booking_id}}"}},
             {"kind": "tool_called", "tool": "transfer_to_human_agents",
              "arguments": {"reason": "compensation", "booking_id": "{{booking_id}}"}},
             {"kind": "order", "tools": ["find_leg", "transfer_to_human_agents"]},
             {"kind": "unchanged_except"}]}},
        # 4. A booking with a flown leg cannot be cancelled as a whole: look it up, restate what decides, refuse.
        {"family": {"query": FLOWN_CANCEL.strip()},
         "instruction": "{{instruction}}",
         "anchor": {"table": "bookings", "key": "{{booking_id}}"},
         "reference": [{"tool": "find_customer_by_email", "arguments": {"email": "{{email}}"}},
                       {"tool": "get_booking", "arguments": {"booking_id": "{{booking_id}}"}}],
         "answer": "Your booking {{booking_id}} has not yet flown 0. Part of booking "
                   "{{booking_id}} has already been flown, so I cannot cancel the whole booking. "
                   "I can still cancel the flights you have not taken yet.",
         "vcode": {"checks": [
             verified("{{email}}"),
             {"kind": "tool_called", "tool": "get_booking", "arguments": {"booking_id": "{{booking_id}}"}},
             {"kind": "answer", "mode": "contains", "value": "flown", "field": "booking_legs.status"},
             {"kind": "tool_not_called", "tool": "cancel_booking"},
             {"kind": "tool_not_called", "tool": "cancel_legs"},
             {"kind": "unchanged_except"}]}},
        # 5. Read inside the JSON column: how many bags across the booking's legs (added with the calculator).
        {"family": {"query": BAGS.strip()},
         "instruction": "{{instruction}}",
         "anchor": {"table": "bookings", "key": "{{booking_id}}"},
         "reference": [{"tool": "find_customer_by_email", "arguments": {"email": "{{email}}"}},
                       {"tool": "list_legs", "arguments": {"booking_id": "{{booking_id}}"}},
                       {"tool": "calculate", "arguments": {"expression": "{{bags_sum}}"}}],
         "answer": "You have {{bags_text}} across the flights of booking {{booking_id}}.",
         "vcode": {"checks": [
             verified("{{email}}"),
             {"kind": "tool_called", "tool": "list_legs", "arguments": {"booking_id": "{{booking_id}}"}},
             {"kind": "answer", "mode": "number", "value": "{{bags}}"},
             {"kind": "unchanged_except"}]}},
    ]


def world_document(customer_count: int = CUSTOMERS, flight_numbers: int = FLIGHT_NUMBERS,
                   booking_count: int = BOOKINGS) -> dict:
    """The whole world document (``main`` writes it at the default size; :data:`FIRST_SIZE` is the first one)."""
    rows = build_rows(random.Random(SEED), customer_count, flight_numbers, booking_count)
    return {
        "format_version": "1",
        "identity": {
            "id": "northwind-air", "name": "Northwind Air", "domain": "airline customer service",
            "description": "Northwind Air flies between twelve US cities. The support agent helps passengers by chat "
                           "with their bookings: looking up flights, cancelling legs or whole bookings, changing "
                           "meals, and handing compensation requests to a human agent."},
        "policies": POLICIES,
        "state": {
            "tables": TABLES,
            "indexes": INDEXES,
            "anchors": [
                {"table": "customers", "label": "customer", "natural_keys": ["email"], "internal_key": True,
                 "answer_fields": ["name", "tier"]},
                {"table": "bookings", "label": "booking", "answer_fields": ["status", "cabin", "booked_on", "total"]},
                {"table": "flights", "label": "flight", "named_as": "flight {flight_no} on {flight_date}",
                 "answer_fields": ["status", "departs", "seats_left", "fare"]},
                {"table": "booking_legs", "label": "leg", "named_as": "leg {position} of booking {booking_id}",
                 "answer_fields": ["flight_no", "flight_date", "status"]}],
            "rows": rows},
        "tools": [*TOOLS, CALCULATE],
        "tasks": build_tasks(),
        # The policies' procedures, as data: verify the customer by email first; look before writing, and explain
        # instead of calling a write whose rule does not hold (confirmations are declared on the tools).
        "procedures": {"identify": "find_customer_by_email", "check_before_write": True, "handoff": HANDOFF},
    }


def main() -> None:
    world = world_document()
    rows = world["state"]["rows"]
    OUT.write_text(json.dumps(world, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    counts = ", ".join(f"{name} {len(table)}" for name, table in rows.items())
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes): {counts}")


if __name__ == "__main__":
    main()
