"""Generate examples/it_helpdesk/world.json: the internal IT service desk of Meridian Analytics.

Deterministic: every random choice comes from ``random.Random(SEED)``, so running this
script twice writes byte-identical output. Run with ``python examples/it_helpdesk/generate.py``.
"""

from __future__ import annotations

import json
import random
from datetime import date, timedelta
from pathlib import Path

SEED = 20260316
TODAY = date(2026, 3, 16)
OUT = Path(__file__).with_name("world.json")
MAIL = "meridian-analytics.com"

FIRST = ["Adaeze", "Bjorn", "Chloe", "Dmitri", "Esther", "Felix", "Grace", "Hugo", "Ines", "Jonah", "Kavya", "Liam",
         "Maya", "Nikolai", "Olivia", "Pedro", "Rania", "Samuel", "Thea", "Umar", "Vera", "William", "Ximena",
         "Yusuf", "Zara", "Arjun", "Beatriz", "Connor", "Dalia", "Emeka", "Farah", "Gustavo", "Hana", "Ivan", "Jasmine",
         "Kofi", "Lucia", "Mateo", "Noor", "Oscar"]
LAST = ["Abbott", "Banerjee", "Carvalho", "Delaney", "Espinoza", "Fontaine", "Gallagher", "Horvath", "Iyer",
        "Jovanovic", "Keller", "Larsen", "Mensah", "Nguyen", "O'Brien", "Petrov", "Reyes", "Svensson", "Thornton",
        "Vasquez", "Weber", "Yamamoto", "Ziegler", "Adeyemi", "Brooks", "Chen", "Dvorak", "Ekström", "Fujita", "Holm",
        "Ibarra", "Jensen", "Kowalski", "Lindqvist", "Moreau", "Novak", "Okafor", "Park", "Quinn", "Rossi"]
DEPARTMENTS = {  # department: (head count, titles; the first title is the head's)
    "Engineering": (176, ["VP of Engineering", "Software Engineer", "Senior Software Engineer", "Data Engineer",
                          "Site Reliability Engineer"]),
    "Data Science": (88, ["Head of Data Science", "Data Scientist", "Machine Learning Engineer"]),
    "Sales": (104, ["VP of Sales", "Account Executive", "Sales Development Rep", "Solutions Consultant"]),
    "Finance": (64, ["Controller", "Financial Analyst", "Accountant", "Payroll Specialist"]),
    "Marketing": (64, ["Head of Marketing", "Content Strategist", "Product Marketing Manager"]),
    "People": (48, ["Head of People", "HR Business Partner", "Recruiter"]),
    "Operations": (56, ["COO", "Operations Analyst", "Office Manager", "Procurement Specialist"]),
    "Legal": (40, ["General Counsel", "Corporate Counsel", "Paralegal"]),
}
HEAD_COUNT = sum(count for count, _ in DEPARTMENTS.values())
TICKETS, SPARE_DEVICES = 1300, 72
MODELS = {  # kind: (tag code, models, warranty years)
    "laptop": ("LT", ["Dell Latitude 7440", "Lenovo ThinkPad X1 Carbon Gen 11", "Apple MacBook Pro 14 M3",
                      "HP EliteBook 840 G10"], 3),
    "phone": ("PH", ["Apple iPhone 15", "Google Pixel 8", "Samsung Galaxy S24"], 2),
    "monitor": ("MN", ["Dell U2723QE", "LG 27UP850", "Samsung ViewFinity S8"], 3),
}
SUBJECTS = {
    "hardware": ["Laptop battery drains within two hours", "External monitor not detected", "Keyboard keys sticking",
                 "Docking station does not charge the laptop", "Laptop fan is very loud", "Webcam shows a black image"],
    "software": ["Excel crashes when opening large files", "Cannot install Python 3.12", "Zoom audio cuts out",
                 "Outlook search returns no results", "Request Adobe Acrobat Pro license", "Tableau license expired"],
    "access": ["Need read access to the finance SharePoint", "Request GitHub org invite", "AWS console access for "
               "the forecasting project", "Salesforce permission error on reports", "Jira project admin rights"],
    "network": ["VPN disconnects every few minutes", "Wi-Fi drops in the 3rd floor meeting rooms",
                "Cannot reach the internal wiki from home", "Slow connection to the file server"],
    "account": ["MFA codes not arriving", "Need to change display name", "Email alias request",
                "Shared mailbox missing from Outlook"],
}
SYSTEMS = ["github", "aws-prod", "aws-staging", "salesforce", "jira", "vpn", "netsuite", "workday", "tableau"]
PRIORITIES = ["low", "medium", "high", "urgent"]


def col(name, type_, pk=False, not_null=False, unique=False, references=None, label=None):
    column = {"name": name, "type": type_, "primary_key": pk, "not_null": not_null, "unique": unique,
              "references": references}
    return {**column, "label": label} if label else column


TABLES = [
    {"name": "employees", "columns": [
        col("id", "INTEGER", pk=True), col("name", "TEXT", not_null=True),
        col("email", "TEXT", not_null=True, unique=True), col("department", "TEXT", not_null=True),
        col("title", "TEXT", not_null=True), col("manager_id", "INTEGER", references="employees.id"),
        col("account_status", "TEXT", not_null=True), col("mfa_enrolled", "INTEGER", not_null=True),
        col("password_changed_on", "TEXT", not_null=True), col("must_change_password", "INTEGER", not_null=True)]},
    {"name": "devices", "columns": [
        col("id", "INTEGER", pk=True), col("asset_tag", "TEXT", not_null=True, unique=True),
        col("kind", "TEXT", not_null=True), col("model", "TEXT", not_null=True),
        col("serial", "TEXT", not_null=True, unique=True), col("assigned_to", "INTEGER", references="employees.id"),
        col("status", "TEXT", not_null=True), col("purchased_on", "TEXT", not_null=True),
        col("warranty_until", "TEXT", not_null=True, label="warranty end date")]},
    {"name": "tickets", "owner": "employee_id", "columns": [
        col("id", "INTEGER", pk=True), col("employee_id", "INTEGER", not_null=True, references="employees.id"),
        col("device_id", "INTEGER", references="devices.id"), col("category", "TEXT", not_null=True),
        col("subject", "TEXT", not_null=True), col("priority", "TEXT", not_null=True),
        col("status", "TEXT", not_null=True), col("opened_on", "TEXT", not_null=True, label="date it was opened"),
        col("resolved_on", "TEXT"), col("closed_on", "TEXT")]},
    {"name": "access_grants", "columns": [
        col("id", "INTEGER", pk=True), col("employee_id", "INTEGER", not_null=True, references="employees.id"),
        col("system", "TEXT", not_null=True), col("level", "TEXT", not_null=True),
        col("granted_on", "TEXT", not_null=True), col("expires_on", "TEXT")]},
]


def day(rng: random.Random, start: date, end: date) -> date:
    return start + timedelta(days=rng.randint(0, (end - start).days))


def build_rows(rng: random.Random) -> dict[str, list[list]]:
    names = rng.sample([(f, s) for f in FIRST for s in LAST], HEAD_COUNT)
    employees = []
    for department, (count, titles) in DEPARTMENTS.items():
        head = None
        for position in range(count):
            first, last = names.pop()
            employee_id = 101 + len(employees)
            email = f"{first}.{last}".lower().replace("'", "").replace("ö", "o") + f"@{MAIL}"
            status = "active" if position == 0 else rng.choices(["active", "locked", "disabled"], [78, 13, 9])[0]
            changed = day(rng, date(2025, 8, 1), TODAY - timedelta(days=1)).isoformat()
            employees.append([employee_id, f"{first} {last}", email, department,
                              titles[0] if position == 0 else rng.choice(titles[1:]), head, status,
                              int(rng.random() < 0.75), changed, 0])
            head = head or employee_id

    devices, counters = [], {kind: 0 for kind in MODELS}

    def add_device(kind, owner, status):
        code, models, years = MODELS[kind]
        counters[kind] += 1
        bought = day(rng, date(2022, 1, 10), date(2026, 2, 20))
        serial = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789") for _ in range(10))
        warranty_end = date(bought.year + years, bought.month, min(bought.day, 28))
        devices.append([1001 + len(devices), f"MER-{code}-{counters[kind]:04d}", kind, rng.choice(models), serial,
                        owner, status, bought.isoformat(), warranty_end.isoformat()])

    for employee in employees:
        if employee[6] == "disabled":
            continue
        add_device("laptop", employee[0], "in_use" if rng.random() < 0.92 else "in_repair")
        if rng.random() < 0.35:
            add_device("phone", employee[0], "in_use")
        if rng.random() < 0.25:
            add_device("monitor", employee[0], "in_use")
    for _ in range(SPARE_DEVICES):
        kind = rng.choice(["laptop", "laptop", "phone", "monitor"])
        add_device(kind, None, rng.choice(["spare", "spare", "retired"]))

    laptops = {d[5]: d[0] for d in devices if d[2] == "laptop" and d[5]}
    staff = [e for e in employees if e[6] != "disabled"]
    tickets = []
    for index in range(TICKETS):
        employee = rng.choice(staff)
        category = rng.choices(list(SUBJECTS), [25, 25, 20, 15, 15])[0]
        opened = day(rng, TODAY - timedelta(days=60), TODAY)
        status = rng.choices(["open", "in_progress", "resolved", "closed"], [28, 22, 34, 16])[0]
        resolved = closed = None
        if status in ("resolved", "closed"):
            resolved = min(opened + timedelta(days=rng.randint(0, 5)), TODAY)
            if status == "closed":
                closed = min(resolved + timedelta(days=rng.randint(1, 3)), TODAY).isoformat()
            resolved = resolved.isoformat()
        tickets.append([4001 + index, employee[0], laptops.get(employee[0]) if category == "hardware" else None,
                        category, rng.choice(SUBJECTS[category]), rng.choices(PRIORITIES, [25, 40, 25, 10])[0],
                        status, opened.isoformat(), resolved, closed])
    tickets.sort(key=lambda t: (t[7], t[0]))
    for index, ticket in enumerate(tickets):  # ticket numbers follow the opening date
        ticket[0] = 4001 + index

    grants = []
    for employee in employees:
        for system in sorted(rng.sample(SYSTEMS, rng.randint(1, 4))):
            granted = day(rng, date(2024, 1, 1), TODAY - timedelta(days=1))
            expires = None if rng.random() < 0.7 else (granted + timedelta(days=365)).isoformat()
            level = rng.choices(["read", "write", "admin"], [55, 35, 10])[0]
            grants.append([len(grants) + 1, employee[0], system, level, granted.isoformat(), expires])
    return {"employees": employees, "devices": devices, "tickets": tickets, "access_grants": grants}


def prop(type_, description, **extra):
    return {"type": type_, "description": description, **extra}


def tool(name, description, effect, properties, statements, shape, *, preconditions=(), anchors=None,
         not_found=None, result_noun=None, action=None):
    result = {"shape": shape}
    if not_found:
        result["not_found"] = not_found
    spec = {"name": name, "description": description, "effect": effect, "statements": list(statements),
            "parameters": {"type": "object", "properties": properties, "additionalProperties": False,
                           "required": list(properties)},
            "preconditions": [{"sql": sql, "error": error, **({"explanation": why[0]} if why else {})}
                              for sql, error, *why in preconditions],
            "result": result, "anchors": anchors or {}}
    if result_noun:
        spec["result_noun"] = result_noun
    if action:
        spec["action"] = action
    return spec


EMPLOYEE_ID = prop("integer", "Employee id as returned by find_employee_by_email.")
TICKET_ID = prop("integer", "Ticket number, e.g. 4123.")
DEVICE_ID = prop("integer", "Device id (not the asset tag).")
EMPLOYEE_COLUMNS = "id, name, email, department, title, manager_id, account_status, mfa_enrolled"
EMPLOYEE_FULL = EMPLOYEE_COLUMNS + ", password_changed_on, must_change_password"
DEVICE_COLUMNS = ("id, asset_tag, kind, model, serial, assigned_to, status, purchased_on, warranty_until, "
                  f"warranty_until >= '{TODAY.isoformat()}' AS under_warranty")
"""A device as the tools show it: with whether its warranty still runs today (1) or has ended (0), as a desk's
inventory screen shows it, so a repair's warranty rule is read, not worked out from dates."""
TICKET_COLUMNS = "id, employee_id, device_id, category, subject, priority, status, opened_on, resolved_on, closed_on"


def exists(table, param, what):
    return f"SELECT EXISTS (SELECT 1 FROM {table} WHERE id = :{param})", f"No {what} with that id exists."


CALCULATE = {"name": "calculate", "effect": "none", "builtin": "calculate", "result": {"shape": "recorded"},
             "description": "Work out arithmetic: add up listed amounts (e.g. 12.5 + 30 + 7.25), or count listed "
                            "items by adding 1 per item (1 + 1 + 1).",
             "parameters": {"type": "object", "additionalProperties": False, "required": ["expression"],
                            "properties": {"expression": {"type": "string", "maxLength": 500,
                                                          "description": "Numbers with + - * / and parentheses."}}}}
"""The desk's calculator (the ``calculate`` built-in): aggregate answers quote its result."""

TOOLS = [
    tool("find_employee_by_email", "Look up an employee by work email (use it to verify the requester).", "read",
         {"email": prop("string", f"Work email address, e.g. jane.doe@{MAIL}.")},
         [f"SELECT {EMPLOYEE_COLUMNS} FROM employees WHERE email = lower(trim(:email))"],
         "row", anchors={"email": "employees.email"}, not_found="No employee uses that email address."),
    tool("get_employee", "Get an employee's account record by id.", "read", {"employee_id": EMPLOYEE_ID},
         [f"SELECT {EMPLOYEE_FULL} FROM employees WHERE id = :employee_id"],
         "row", anchors={"employee_id": "employees.id"}, not_found="No employee with that id exists."),
    tool("list_devices", "List the devices assigned to an employee.", "read", {"employee_id": EMPLOYEE_ID},
         ["SELECT id, asset_tag, kind, model, status, warranty_until, "
          f"warranty_until >= '{TODAY.isoformat()}' AS under_warranty FROM devices "
          "WHERE assigned_to = :employee_id ORDER BY id"],
         "rows", anchors={"employee_id": "employees.id"}, result_noun="devices"),
    tool("get_device", "Get a device by id.", "read", {"device_id": DEVICE_ID},
         [f"SELECT {DEVICE_COLUMNS} FROM devices WHERE id = :device_id"],
         "row", anchors={"device_id": "devices.id"}, not_found="No device with that id exists."),
    tool("find_device_by_asset_tag", "Look up a device by the asset tag on its sticker, e.g. MER-LT-0042.", "read",
         {"asset_tag": prop("string", "Asset tag printed on the device.")},
         [f"SELECT {DEVICE_COLUMNS} FROM devices WHERE asset_tag = upper(trim(:asset_tag))"],
         "row", anchors={"asset_tag": "devices.asset_tag"}, not_found="No device has that asset tag."),
    tool("list_tickets", "List the tickets an employee has opened, newest first.", "read",
         {"employee_id": EMPLOYEE_ID},
         ["SELECT id, subject, category, priority, status, opened_on FROM tickets "
          "WHERE employee_id = :employee_id ORDER BY opened_on DESC, id DESC"],
         "rows", anchors={"employee_id": "employees.id"}, result_noun="tickets"),
    tool("get_ticket", "Get a ticket by number.", "read", {"ticket_id": TICKET_ID},
         [f"SELECT {TICKET_COLUMNS} FROM tickets WHERE id = :ticket_id"],
         "row", anchors={"ticket_id": "tickets.id"}, not_found="No ticket with that number exists."),
    tool("list_access_grants", "List the systems an employee has access to, with level and expiry.", "read",
         {"employee_id": EMPLOYEE_ID},
         ["SELECT id, system, level, granted_on, expires_on FROM access_grants "
          "WHERE employee_id = :employee_id ORDER BY system"],
         "rows", anchors={"employee_id": "employees.id"}, result_noun="access grants"),
    tool("reset_password", "Reset an employee's password: a temporary password goes to their registered phone "
         "and must be changed at next sign-in.", "write", {"employee_id": EMPLOYEE_ID},
         [f"UPDATE employees SET password_changed_on = '{TODAY.isoformat()}', must_change_password = 1 "
          "WHERE id = :employee_id",
          "SELECT id, name, account_status, password_changed_on, must_change_password FROM employees "
          "WHERE id = :employee_id"],
         "row",
         preconditions=[exists("employees", "employee_id", "employee"),
                        ("SELECT account_status <> 'disabled' FROM employees WHERE id = :employee_id",
                         "This account is disabled (former employee); passwords of disabled accounts are never reset.",
                         "it is disabled, and passwords of disabled accounts are never reset"),
                        ("SELECT account_status <> 'locked' FROM employees WHERE id = :employee_id",
                         "This account is locked by Security; it must be unlocked by the Security team first.",
                         f"it is locked, and only the Security team (security@{MAIL}) can unlock it"),
                        ("SELECT mfa_enrolled = 1 FROM employees WHERE id = :employee_id",
                         "The employee has not enrolled in MFA; a password reset requires MFA enrollment.",
                         "MFA is not enrolled on it yet, and a password reset needs MFA")],
         anchors={"employee_id": "employees.id"}, action="reset the password of"),
    tool("update_ticket_priority", "Change the priority of an open or in-progress ticket.", "write",
         {"ticket_id": TICKET_ID, "priority": prop("string", "The new priority.", enum=PRIORITIES)},
         ["UPDATE tickets SET priority = :priority WHERE id = :ticket_id",
          f"SELECT {TICKET_COLUMNS} FROM tickets WHERE id = :ticket_id"],
         "row",
         preconditions=[exists("tickets", "ticket_id", "ticket"),
                        ("SELECT status IN ('open', 'in_progress') FROM tickets WHERE id = :ticket_id",
                         "Only open or in-progress tickets can be re-prioritised.",
                         "it is no longer open or in progress, and only those tickets can be re-prioritised"),
                        ("SELECT priority <> :priority FROM tickets WHERE id = :ticket_id",
                         "The ticket already has that priority.", "it already has that priority")],
         anchors={"ticket_id": "tickets.id"}, action="set the priority of {row} to {priority}"),
    tool("close_ticket", "Close a resolved ticket at the requester's request.", "write", {"ticket_id": TICKET_ID},
         [f"UPDATE tickets SET status = 'closed', closed_on = '{TODAY.isoformat()}' WHERE id = :ticket_id",
          f"SELECT {TICKET_COLUMNS} FROM tickets WHERE id = :ticket_id"],
         "row",
         preconditions=[exists("tickets", "ticket_id", "ticket"),
                        ("SELECT status = 'resolved' FROM tickets WHERE id = :ticket_id",
                         "Only resolved tickets can be closed; this ticket is not resolved.",
                         "it is not resolved yet, and only resolved tickets can be closed")],
         anchors={"ticket_id": "tickets.id"}, action="close"),
    tool("send_device_for_repair", "Send an in-use device under warranty to the vendor for repair.", "write",
         {"device_id": DEVICE_ID},
         ["UPDATE devices SET status = 'in_repair' WHERE id = :device_id",
          f"SELECT {DEVICE_COLUMNS} FROM devices WHERE id = :device_id"],
         "row",
         preconditions=[exists("devices", "device_id", "device"),
                        ("SELECT status = 'in_use' FROM devices WHERE id = :device_id",
                         "Only devices that are in use can be sent for repair.",
                         "it is not in use, and only devices in use can be sent for repair"),
                        (f"SELECT warranty_until >= '{TODAY.isoformat()}' FROM devices WHERE id = :device_id",
                         "This device is out of warranty; repairs need approval from IT procurement.",
                         "it is out of warranty, so a repair needs approval from IT procurement")],
         anchors={"device_id": "devices.id"}, action="send {row} for repair"),
]

POLICIES = [
    f"Today is {TODAY.isoformat()}. Use this date for every date calculation.",
    "Verify the requester by looking up their work email before acting on any account, device or ticket, and act "
    "only on the requester's own account, devices and tickets.",
    "Password resets are only allowed for active accounts with MFA enrolled. Locked accounts must be unlocked by "
    f"the Security team (security@{MAIL}); disabled accounts belong to former employees and are never reset.",
    "Never read out, guess or choose a password: a reset sends a temporary password to the employee's registered "
    "phone, which must be changed at the next sign-in.",
    "Only open or in-progress tickets may be re-prioritised. Set urgent only when a whole team or a customer "
    "deliverable is blocked.",
    "Only resolved tickets can be closed, and only when the requester asks for it.",
    "Devices are sent for repair only if they are in use and under warranty; out-of-warranty repairs need "
    "approval from IT procurement.",
    "Never grant or change access to systems: access requests go through the approval workflow in the access portal.",
    "Never share another employee's devices, tickets, access or account details.",
]


# Family queries: one case per row. Wording varies with the anchor row, as real employees' messages do.
RESET = """
SELECT e.id AS employee_id, e.email,
       CASE e.id % 3 WHEN 0 THEN 'Hi, this is ' || e.name || ' (' || e.email || '). I forgot my password while I '
                                 || 'was on vacation. Can you reset it?'
                     WHEN 1 THEN 'It''s ' || e.email || '. I typed my password wrong too many times and now I '
                                 || 'can''t remember it. Please reset it.'
                     ELSE e.name || ' from ' || e.department || ' here, ' || e.email || '. Could you reset my '
                          || 'password? I can''t sign in.' END AS instruction
FROM employees e
WHERE e.account_status = 'active' AND e.mfa_enrolled = 1
"""

LOCKED = """
SELECT e.id AS employee_id, e.email, e.password_changed_on,
       CASE e.id % 2 WHEN 0 THEN 'It''s ' || e.email || '. I can''t sign in anymore, please just reset my password.'
                     ELSE 'Hello, ' || e.name || ' here (' || e.email || '). My sign-in keeps failing. Can you '
                          || 'reset my password so I can get back to work?' END AS instruction
FROM employees e
WHERE e.account_status = 'locked' AND e.mfa_enrolled = 1
"""

URGENT = """
SELECT e.id AS employee_id, e.email, t.id AS ticket_id, t.status,
       CASE e.id % 2 WHEN 0 THEN 'Hi, it''s ' || e.email || '. My ticket "' || t.subject || '" is blocking the '
                                 || 'whole ' || e.department || ' team before a client deadline. Please raise it '
                                 || 'to urgent.'
                     ELSE e.email || ' here. "' || t.subject || '" (my ticket) now blocks a customer deliverable '
                          || 'for the ' || e.department || ' team. Can you make it urgent?' END AS instruction
FROM employees e JOIN tickets t ON t.employee_id = e.id
WHERE t.status IN ('open', 'in_progress') AND t.priority <> 'urgent'
  AND t.id = (SELECT max(t2.id) FROM tickets t2 WHERE t2.employee_id = e.id AND t2.status IN ('open', 'in_progress')
              AND t2.priority <> 'urgent')
  AND (SELECT count(*) FROM tickets t3 WHERE t3.employee_id = e.id AND t3.subject = t.subject) = 1
"""

CLOSE = """
SELECT t.id AS ticket_id, e.email,
       CASE t.id % 3 WHEN 0 THEN 'This is ' || e.email || '. Ticket ' || t.id || ' is fixed on my side, you can '
                                 || 'close it. Thanks!'
                     WHEN 1 THEN 'Hi, ' || e.email || ' here. All good with ticket ' || t.id || ' now, please '
                                 || 'close it.'
                     ELSE 'I''m ' || e.name || ' (' || e.email || '). You can close ticket ' || t.id || ', the '
                          || 'problem is solved.' END AS instruction
FROM tickets t JOIN employees e ON e.id = t.employee_id
WHERE t.status = 'resolved'
"""

LAPTOP = """
SELECT e.id AS employee_id, e.email, d.model, d.asset_tag, d.warranty_until,
       CASE e.id % 2 WHEN 0 THEN 'Hello, ' || e.name || ' here (' || e.email || '). What''s the asset tag of my '
                                 || 'laptop, and until when is it under warranty?'
                     ELSE 'I''m ' || e.email || '. Which asset tag does my laptop have, and when does its '
                          || 'warranty end?' END AS instruction
FROM employees e JOIN devices d ON d.assigned_to = e.id AND d.kind = 'laptop'
WHERE (SELECT count(*) FROM devices x WHERE x.assigned_to = e.id AND x.kind = 'laptop') = 1
  AND (SELECT count(*) FROM devices x WHERE x.assigned_to = e.id) >= 2
"""


def verified(address):
    """The identity policy: verify the requester by looking up the email they gave."""
    return {"kind": "tool_called", "tool": "find_employee_by_email", "arguments": {"email": address}}


def password_row(expect):
    return {"kind": "sql", "query": "SELECT password_changed_on, must_change_password FROM employees WHERE id = :id",
            "params": {"id": "{{employee_id}}"}, "expect": [expect]}


def build_tasks():
    unchanged = {"kind": "unchanged_except"}
    return [
        # 1. Reset the password of an active, MFA-enrolled employee (a family over such employees).
        {"family": {"query": RESET.strip()},
         "instruction": "{{instruction}}",
         "anchor": {"table": "employees", "key": "{{employee_id}}"},
         "reference": [{"tool": "find_employee_by_email", "arguments": {"email": "{{email}}"}},
                       {"tool": "reset_password", "arguments": {"employee_id": {"$from": 0, "pointer": "/id"}}}],
         "answer": None,
         "vcode": {"checks": [
             password_row([TODAY.isoformat(), 1]),
             {"kind": "tool_called", "tool": "reset_password", "arguments": {"employee_id": "{{employee_id}}"}},
             verified("{{email}}"),
             {"kind": "order", "tools": ["find_employee_by_email", "reset_password"]},
             {"kind": "unchanged_except", "rows": [{"table": "employees", "key": "{{employee_id}}"}]}]}},
        # 2. A locked account: the agent must look it up, not reset, and send the employee to Security.
        {"family": {"query": LOCKED.strip()},
         "instruction": "{{instruction}}",
         "anchor": {"table": "employees", "key": "{{employee_id}}"},
         "reference": [{"tool": "find_employee_by_email", "arguments": {"email": "{{email}}"}}],
         "answer": f"Your account is locked, so I can't reset your password. Please contact the Security team at "
                   f"security@{MAIL} to have it unlocked.",
         "vcode": {"checks": [
             verified("{{email}}"),
             {"kind": "answer", "mode": "contains", "value": "locked", "field": "employees.account_status"},
             {"kind": "tool_not_called", "tool": "reset_password"},
             password_row(["{{password_changed_on}}", 0]),
             unchanged]}},
        # 3. Raise the requester's own open ticket (named by subject) to urgent. The requester is the anchor: they
        #    name themselves by email and the ticket only by subject, so the ticket is found through them.
        {"family": {"query": URGENT.strip()},
         "instruction": "{{instruction}}",
         "anchor": {"table": "employees", "key": "{{employee_id}}"},
         "reference": [{"tool": "find_employee_by_email", "arguments": {"email": "{{email}}"}},
                       {"tool": "list_tickets", "arguments": {"employee_id": {"$from": 0, "pointer": "/id"}}},
                       {"tool": "update_ticket_priority",
                        "arguments": {"ticket_id": "{{ticket_id}}", "priority": "urgent"}}],
         "answer": None,
         "vcode": {"checks": [
             {"kind": "sql", "query": "SELECT priority, status FROM tickets WHERE id = :id",
              "params": {"id": "{{ticket_id}}"}, "expect": [["urgent", "{{status}}"]]},
             {"kind": "tool_called", "tool": "update_ticket_priority",
              "arguments": {"ticket_id": "{{ticket_id}}", "priority": "urgent"}},
             verified("{{email}}"),
             {"kind": "order", "tools": ["find_employee_by_email", "update_ticket_priority"]},
             {"kind": "unchanged_except", "rows": [{"table": "tickets", "key": "{{ticket_id}}"}]}]}},
        # 4. Close a resolved ticket at the requester's request.
        {"family": {"query": CLOSE.strip()},
         "instruction": "{{instruction}}",
         "anchor": {"table": "tickets", "key": "{{ticket_id}}"},
         "reference": [{"tool": "find_employee_by_email", "arguments": {"email": "{{email}}"}},
                       {"tool": "get_ticket", "arguments": {"ticket_id": "{{ticket_id}}"}},
                       {"tool": "close_ticket", "arguments": {"ticket_id": {"$from": 1, "pointer": "/id"}}}],
         "answer": None,
         "vcode": {"checks": [
             {"kind": "sql", "query": "SELECT status, closed_on FROM tickets WHERE id = :id",
              "params": {"id": "{{ticket_id}}"}, "expect": [["closed", TODAY.isoformat()]]},
             {"kind": "tool_called", "tool": "close_ticket", "arguments": {"ticket_id": "{{ticket_id}}"}},
             verified("{{email}}"),
             {"kind": "order", "tools": ["find_employee_by_email", "close_ticket"]},
             {"kind": "unchanged_except", "rows": [{"table": "tickets", "key": "{{ticket_id}}"}]}]}},
        # 5. A question: the asset tag and warranty end of the requester's only laptop (they have other devices).
        {"family": {"query": LAPTOP.strip()},
         "instruction": "{{instruction}}",
         "anchor": {"table": "employees", "key": "{{employee_id}}"},
         "reference": [{"tool": "find_employee_by_email", "arguments": {"email": "{{email}}"}},
                       {"tool": "list_devices", "arguments": {"employee_id": {"$from": 0, "pointer": "/id"}}}],
         "answer": "Your laptop ({{model}}) has asset tag {{asset_tag}} and is under warranty until "
                   "{{warranty_until}}.",
         "vcode": {"checks": [
             verified("{{email}}"),
             {"kind": "tool_called", "tool": "list_devices", "arguments": {"employee_id": "{{employee_id}}"}},
             {"kind": "answer", "mode": "contains", "value": "{{asset_tag}}", "field": "devices.asset_tag"},
             {"kind": "answer", "mode": "contains", "value": "{{warranty_until}}", "field": "devices.warranty_until"},
             unchanged]}},
    ]


def main() -> None:
    rng = random.Random(SEED)
    rows = build_rows(rng)
    world = {
        "format_version": "1",
        "identity": {
            "id": "meridian-it", "name": "Meridian Analytics IT Service Desk", "domain": "IT helpdesk",
            "description": f"Meridian Analytics is a {HEAD_COUNT}-person data consultancy. Its internal IT "
                           "service desk helps employees with their accounts, laptops and phones, support tickets "
                           "and access to company systems."},
        "policies": POLICIES,
        "state": {
            "tables": TABLES,
            "anchors": [
                {"table": "employees", "label": "employee", "natural_keys": ["email"], "internal_key": True,
                 "answer_fields": ["name", "department", "title", "account_status"]},
                {"table": "devices", "label": "device", "natural_keys": ["asset_tag"], "internal_key": True,
                 "answer_fields": ["model", "status", "warranty_until"]},
                {"table": "tickets", "label": "ticket", "natural_keys": [],
                 "answer_fields": ["subject", "priority", "status", "opened_on"]}],
            "rows": rows},
        "tools": [*TOOLS, CALCULATE],
        "tasks": build_tasks(),
        # The policies' procedures, as data: verify the requester by work email first; look before writing, and
        # explain instead of calling a write whose rule does not hold.
        "procedures": {"identify": "find_employee_by_email", "check_before_write": True},
    }
    OUT.write_text(json.dumps(world, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    counts = ", ".join(f"{name} {len(table)}" for name, table in rows.items())
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes): {counts}")


if __name__ == "__main__":
    main()
