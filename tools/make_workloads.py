"""Generate the bundled prompt sets ``src/specnb/prompts/sets/{copy,freeform}.jsonl``.

Why generated: a sweep needs many distinct prompts per category (64 here), so that a point
with dozens of requests does not send the same few prompts again and again (a repeated
prompt is a prefix-cache hit and an n-gram drafter's dream). Writing 640 prompts by hand
is not practical; writing the *material* by hand is. This script combines hand-written
templates with hand-written content (``workload_content.py``: code snippets and the edits
that fit each, passages, word pools) and fills in records, documents, lists and numbers
with a seeded RNG, so the output is varied and reproducible byte for byte.

Two sets, five categories each, interleaved (prompt i is category i mod 5), so any prefix
of a set mixes its categories:

- ``copy``: the answer quotes or edits the prompt: ``edit-code``, ``fix-json``,
  ``quote-summary``, ``extract-fields``, ``list-transform`` (sort, number, de-duplicate,
  reformat or translate a list);
- ``freeform``: ``chat``, ``creative``, ``explanation``, ``reasoning``, ``math``.

    python tools/make_workloads.py            # rewrite the two files
    python tools/make_workloads.py --check    # exit 1 if the committed files differ
    python tools/make_workloads.py --tokenizer models/SmolLM2-135M-Instruct   # print token lengths
    python tools/make_workloads.py --train drafters/train-prompts.jsonl     # the drafter's training prompts

``--train`` writes the prompts ``make drafter`` trains an EAGLE-3 head on: the same generators
with another seed (``<SEED>:train:<category>``) and more prompts per category, every prompt
that is in an evaluation set (``copy``, ``freeform``, ``json``) dropped, plus questions
about Python's own standard library (its modules' docstrings: text every machine has).
The drafter's training data and the panels it is measured on share templates, never a prompt:
a head trained on traffic like the user's own, as self-distillation recipes do.

Prompts stay well inside ``max_model_len`` 2048 with 256 output tokens on SmolLM2
(``--tokenizer`` prints the longest; the unit tests bound their length).
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workload_content as wc  # noqa: E402 - the hand-written content next to this script

SEED = 20261129
PER_CATEGORY = 64
OUT = Path(__file__).resolve().parents[1] / "src" / "specnb" / "prompts" / "sets"
COPY_CATEGORIES = ["edit-code", "fix-json", "quote-summary", "extract-fields", "list-transform"]
FREE_CATEGORIES = ["chat", "creative", "explanation", "reasoning", "math"]


_SPLIT = ""  # "" for the evaluation sets; "train:" while --train builds the drafter's prompts


def _rng(category: str) -> random.Random:
    # one stream per category: editing one generator never reshuffles another's prompts
    return random.Random(f"{SEED}:{_SPLIT}{category}")


def _person(rng: random.Random) -> tuple[str, str]:
    return rng.choice(wc.FIRST_NAMES), rng.choice(wc.LAST_NAMES)


def _email(first: str, last: str) -> str:
    return f"{first.lower()}.{last.lower()}@example.com"


def _date(rng: random.Random, year: int | None = None) -> tuple[int, int, int]:
    return (year or rng.choice([2023, 2024, 2025])), rng.randint(1, 12), rng.randint(1, 28)


def _iso(d: tuple[int, int, int]) -> str:
    return f"{d[0]:04d}-{d[1]:02d}-{d[2]:02d}"


def _long(d: tuple[int, int, int]) -> str:
    return f"{d[2]} {wc.MONTHS[d[1] - 1]} {d[0]}"


def _code(rng: random.Random, prefix: str, digits: int) -> str:
    return f"{prefix}-{rng.randint(10 ** (digits - 1), 10 ** digits - 1)}"


def _distinct(make: Callable[[], str], n: int, tries: int = 20_000) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    for _ in range(tries):
        p = make()
        if p not in seen:
            seen.add(p)
            out.append(p)
            if len(out) == n:
                return out
    raise RuntimeError(f"only {len(out)} distinct prompts after {tries} tries")


# =========================================================================== copy-style


def gen_edit_code(rng: random.Random) -> list[str]:
    specific, generic = [], []
    for s in wc.SNIPPETS:
        specific += [(s, e) for e in s["edits"]]
        indent = "tab" if "\n\t" in s["code"] else ("2" if "\n    " in s["code"] else "4")
        generic.append((s, wc.GENERIC_EDITS[0]))
        if indent != "tab":
            generic.append((s, wc.GENERIC_EDITS[1].format(indent=indent)))
        if s["fn"] in wc.NEW_NAMES:
            generic.append((s, wc.GENERIC_EDITS[2].format(fn=s["fn"], new_fn=wc.NEW_NAMES[s["fn"]])))
    rng.shuffle(generic)
    chosen = specific + generic[: max(0, PER_CATEGORY - len(specific))]
    rng.shuffle(chosen)
    prompts = []
    for s, edit in chosen[:PER_CATEGORY]:
        lang = wc.LANG_NAMES[s["lang"]]
        intro = rng.choice(wc.CODE_INTROS).format(lang_name=lang, where=s["where"])
        outro = rng.choice(wc.CODE_OUTROS)
        block = f"```{s['lang']}\n{s['code']}\n```"
        ask = " ".join(x for x in (intro, edit, outro) if x)
        if rng.random() < 0.3:
            prompts.append(f"{block}\n\n{ask}")
        else:
            prompts.append(f"{ask}\n\n{block}")
    return prompts


# --- fix-json: records built from pools, one error put in by hand-written rules


def _rec_order(rng):
    fn, ln = _person(rng)
    sub = rng.randint(1500, 25000) / 100
    return "order record", "our checkout service", [
        ("id", _code(rng, "ORD", 5)), ("customer", f"{fn} {ln}"), ("email", _email(fn, ln)),
        ("items", rng.randint(1, 9)), ("subtotal", sub), ("shipping", rng.choice([0.0, 4.5, 5.0, 6.95])),
        ("currency", rng.choice(["EUR", "GBP", "USD", "NOK"])), ("gift_wrap", rng.random() < 0.3),
        ("notes", rng.choice(["Leave at the side door", "Ring twice", "No plastic packaging", "Call on arrival"])),
    ]


def _rec_profile(rng):
    fn, ln = _person(rng)
    return "user profile", "the admin tool", [
        ("user_id", rng.randint(10000, 99999)), ("username", (fn[0] + ln).lower()), ("display_name", f"{fn} {ln}"),
        ("email", _email(fn, ln)), ("active", rng.random() < 0.8), ("role", rng.choice(["editor", "viewer", "admin"])),
        ("timezone", rng.choice(wc.TIMEZONES)), ("created", _iso(_date(rng))),
    ]


def _rec_config(rng):
    svc = rng.choice(["thumbnail-worker", "invoice-mailer", "search-indexer", "audit-logger", "report-builder"])
    return "service configuration", "our deployment tool", [
        ("service", svc), ("version", f"{rng.randint(1, 4)}.{rng.randint(0, 12)}.{rng.randint(0, 9)}"),
        ("replicas", rng.randint(1, 8)), ("queue", rng.choice(["image-jobs", "mail-out", "index-updates", "audit"])),
        ("max_retries", rng.randint(2, 7)), ("timeout_seconds", rng.choice([10, 30, 60, 120])),
        ("log_level", rng.choice(["info", "debug", "warning"])), ("enable_metrics", rng.random() < 0.7),
        ("owner", None if rng.random() < 0.3 else rng.choice(wc.DEPARTMENTS).lower()),
    ]


def _rec_weather(rng):
    return "weather-station reading", "our importer", [
        ("station_id", _code(rng, "WX", 3)), ("name", rng.choice(["Harbor Point", "Gull Ridge", "Fen Mill", "Larch Hill"])),
        ("latitude", round(rng.uniform(-60, 70), 4)), ("longitude", round(rng.uniform(-170, 170), 4)),
        ("elevation_m", rng.randint(2, 900)), ("temperature_c", round(rng.uniform(-15, 35), 1)),
        ("humidity_pct", rng.randint(20, 99)), ("wind_kph", round(rng.uniform(0, 80), 1)),
        ("reported_at", f"{_iso(_date(rng))}T{rng.randint(0, 23):02d}:00:00Z"),
    ]


def _rec_book(rng):
    fn, ln = _person(rng)
    return "catalogue entry", "the library's catalogue", [
        ("book_id", _code(rng, "BK", 4)), ("title", rng.choice(wc.BOOK_TITLES)), ("author", f"{fn} {ln}"),
        ("pages", rng.randint(90, 620)), ("published_year", rng.randint(1950, 2024)),
        ("language", rng.choice(["en", "pt", "no", "fi", "es"])), ("in_stock", rng.random() < 0.8),
        ("copies", rng.randint(0, 9)), ("shelf", f"{rng.choice('ABCDEFGH')}-{rng.randint(1, 40)}"),
    ]


def _rec_booking(rng):
    fn, ln = _person(rng)
    d, h = _iso(_date(rng, 2024)), rng.randint(8, 16)
    return "room booking", "the booking system", [
        ("booking_id", _code(rng, "RM", 4)), ("room", rng.choice(["Cedar", "Birch", "Willow", "Alder", "Rowan"])),
        ("floor", rng.randint(1, 6)), ("organizer", f"{fn} {ln}"), ("organizer_email", _email(fn, ln)),
        ("start", f"{d}T{h:02d}:00:00"), ("end", f"{d}T{h + rng.randint(1, 2):02d}:30:00"),
        ("attendees", rng.randint(2, 16)), ("projector", rng.random() < 0.5),
    ]


def _rec_recipe(rng):
    dish, ingr = rng.choice([
        ("Lentil soup", ["red lentils", "onion", "carrot", "cumin", "vegetable stock"]),
        ("Banana bread", ["flour", "bananas", "butter", "brown sugar", "egg", "walnuts"]),
        ("Tomato pasta", ["spaghetti", "tinned tomatoes", "garlic", "olive oil", "basil"]),
        ("Chickpea curry", ["chickpeas", "coconut milk", "onion", "ginger", "garam masala"]),
        ("Pancakes", ["flour", "milk", "eggs", "butter", "salt"]),
    ])
    return "recipe", "the recipe app", [
        ("recipe", dish), ("servings", rng.randint(2, 8)), ("prep_minutes", rng.choice([5, 10, 15, 20])),
        ("cook_minutes", rng.choice([20, 30, 40, 55])), ("vegetarian", True), ("ingredients", ingr),
        ("difficulty", rng.choice(["easy", "medium"])), ("rating", round(rng.uniform(3.5, 5.0), 1)),
    ]


def _rec_flight(rng):
    a, b = rng.sample(wc.CITIES, 2)
    d = _iso(_date(rng, 2024))
    dep = rng.randint(6, 18)
    return "flight status record", "the departures board", [
        ("flight", f"{rng.choice(['NW', 'TQ', 'FH', 'LS'])}{rng.randint(100, 9999)}"), ("from", a), ("to", b),
        ("departure", f"{d}T{dep:02d}:{rng.choice(['05', '20', '35', '50'])}:00"),
        ("arrival", f"{d}T{dep + rng.randint(1, 5):02d}:{rng.choice(['10', '25', '40', '55'])}:00"),
        ("aircraft", rng.choice(["A320", "B737", "E190", "ATR72"])), ("seats_available", rng.randint(0, 40)),
        ("status", rng.choice(["on time", "delayed", "boarding"])), ("gate", None if rng.random() < 0.3 else f"B{rng.randint(1, 30)}"),
    ]


def _rec_product(rng):
    name, cents = rng.choice(wc.PRODUCTS)
    return "product listing", "the shop's catalogue importer", [
        ("sku", _code(rng, "SKU", 6)), ("name", name), ("price", cents / 100), ("currency", "EUR"),
        ("tags", rng.sample(["kitchen", "gift", "eco", "home", "office", "outdoor", "sale"], 3)),
        ("dimensions_cm", {"width": rng.randint(5, 40), "height": rng.randint(5, 40), "depth": rng.randint(1, 30)}),
        ("in_stock", rng.random() < 0.8),
    ]


def _rec_employee(rng):
    fn, ln = _person(rng)
    mf, ml = _person(rng)
    return "employee record", "the HR system", [
        ("employee_id", rng.randint(1000, 9999)), ("name", f"{fn} {ln}"), ("department", rng.choice(wc.DEPARTMENTS)),
        ("manager", f"{mf} {ml}"), ("start_date", _iso(_date(rng))),
        ("skills", rng.sample(["SQL", "Python", "negotiation", "Excel", "design", "Spanish", "writing"], 3)),
        ("remote", rng.random() < 0.5),
    ]


def _rec_device(rng):
    return "device status message", "the telemetry pipeline", [
        ("device_id", f"dev-{rng.randint(1000, 9999)}"), ("firmware", f"{rng.randint(1, 3)}.{rng.randint(0, 9)}.{rng.randint(0, 20)}"),
        ("battery_pct", rng.randint(5, 100)), ("online", rng.random() < 0.8),
        ("readings", [{"t": f"{rng.randint(0, 23):02d}:{m:02d}", "value": round(rng.uniform(10, 30), 2)}
                      for m in (0, 15, 30)]),
    ]


def _rec_ticket(rng):
    fn, ln = _person(rng)
    return "event ticket", "the ticketing system", [
        ("event", rng.choice(["Spring Choir Concert", "Harbour Film Night", "Winter Book Fair", "Jazz on the Pier"])),
        ("venue", rng.choice(["Town Hall", "Old Customs House", "St Anne's Hall", "The Granary"])),
        ("date", _iso(_date(rng, 2025))), ("seat", {"section": rng.choice("ABCD"), "row": rng.randint(1, 20),
                                                  "number": rng.randint(1, 30)}),
        ("price", rng.choice([12.5, 18.0, 22.0, 35.0])), ("holder", f"{fn} {ln}"),
    ]


RECORDS = [_rec_order, _rec_profile, _rec_config, _rec_weather, _rec_book, _rec_booking, _rec_recipe,
           _rec_flight, _rec_product, _rec_employee, _rec_device, _rec_ticket]


def _json_lines(fields) -> list[str]:
    """Two-space JSON, arrays of scalars on one line (so a bracket error is visible)."""
    def val(v, depth):
        if isinstance(v, dict):
            inner = [f'{"  " * (depth + 1)}{json.dumps(k)}: {val(x, depth + 1)}' for k, x in v.items()]
            return "{\n" + ",\n".join(inner) + "\n" + "  " * depth + "}"
        if isinstance(v, list) and all(not isinstance(x, (dict, list)) for x in v):
            return "[" + ", ".join(json.dumps(x) for x in v) + "]"
        if isinstance(v, list):
            inner = ["  " * (depth + 1) + val(x, depth + 1) for x in v]
            return "[\n" + ",\n".join(inner) + "\n" + "  " * depth + "]"
        if isinstance(v, float):
            return f"{v:.2f}" if abs(v) < 1000 and round(v, 2) == v else repr(v)
        return json.dumps(v)

    body = [f"  {json.dumps(k)}: {val(v, 1)}" for k, v in fields]
    return ["{", *(b + ("," if i < len(body) - 1 else "") for i, b in enumerate(body)), "}"]


def _break_json(rng, fields, lines: list[str]) -> tuple[list[str], str] | None:
    """Put one syntax error into the top-level lines; returns (lines, description) or None."""
    top = [i for i in range(1, len(lines) - 1) if lines[i].startswith('  "')]
    kinds = ["trailing comma", "missing comma", "single quotes", "unquoted key", "python literal",
             "missing brace", "comment", "bracket", "key quote"]
    kind = rng.choice(kinds)
    out = list(lines)
    if kind == "trailing comma":
        last = max(i for i in range(len(out)) if out[i].startswith("  ") and not out[i].startswith("   "))
        out[last] += ","
        return out, "a trailing comma after the last field"
    if kind == "missing comma":
        cands = [i for i in top if out[i].endswith(",")]
        i = rng.choice(cands)
        out[i] = out[i][:-1]
        return out, "a missing comma between two fields"
    if kind == "single quotes":
        cands = [i for i in top if ': "' in out[i]]
        if not cands:
            return None
        i = rng.choice(cands)
        key, _, rest = out[i].partition(": ")
        comma = "," if rest.endswith(",") else ""
        out[i] = f"{key}: '{rest.rstrip(',')[1:-1]}'{comma}"
        return out, "a string wrapped in single quotes, which JSON does not allow"
    if kind == "unquoted key":
        i = rng.choice(top)
        key, _, rest = out[i].partition(": ")
        out[i] = f"  {key.strip()[1:-1]}: {rest}"
        return out, "a key that is not wrapped in double quotes"
    if kind == "python literal":
        cands = [i for i in top if out[i].split(": ", 1)[1].rstrip(",") in ("true", "false", "null")]
        if not cands:
            return None
        i = rng.choice(cands)
        key, _, rest = out[i].partition(": ")
        lit = {"true": "True", "false": "False", "null": "None"}[rest.rstrip(",")]
        out[i] = f"{key}: {lit}{',' if rest.endswith(',') else ''}"
        return out, "a Python-style literal (True, False or None) instead of a JSON one"
    if kind == "missing brace":
        return out[:-1], "a missing closing brace"
    if kind == "comment":
        i = rng.choice(top)
        note = rng.choice(["checked by ops", "TODO confirm", "imported value", "see ticket 42"])
        out.insert(i + 1, f"  // {note}")
        return out, "a comment line, which JSON does not allow"
    if kind == "bracket":
        cands = [i for i in top if out[i].rstrip(",").endswith("]") and ": [" in out[i]]
        if not cands:
            return None
        i = rng.choice(cands)
        comma = "," if out[i].endswith(",") else ""
        out[i] = out[i].rstrip(",")[:-1] + "}" + comma
        return out, "an array closed with the wrong bracket"
    i = rng.choice(top)  # key quote
    key, _, rest = out[i].partition(": ")
    out[i] = f"{key[:-1]}: {rest}"
    return out, "a key that is missing its closing quote"


FIX_JSON_TEMPLATES = [
    "The JSON object below fails to parse because of a single syntax error. Find it, fix it, and return the "
    "entire corrected JSON object with all fields in the same order and all other values unchanged.",
    "This {thing} is rejected by {system}. It has one syntax error: {hint}. Correct it and return the full JSON, "
    "keeping the keys in the same order and every other value exactly as it is.",
    "Fix the JSON below so that it parses. Only repair the syntax; do not change, add or remove any keys or "
    "values. Return the whole {thing}.",
    "A {thing} exported from {system} fails validation because of {hint}. Return the corrected JSON document in "
    "full.",
    "Our importer refuses this {thing}. Please find the problem, repair it, and reply with the complete, valid "
    "JSON and nothing else.",
    "Validate this {thing}. If it is not valid JSON, explain the error in one sentence and then give the "
    "corrected document in full.",
]


def gen_fix_json(rng: random.Random) -> list[str]:
    def make() -> str:
        while True:
            thing, system, fields = rng.choice(RECORDS)(rng)
            broken = _break_json(rng, fields, _json_lines(fields))
            if broken is not None:
                break
        lines, hint = broken
        json.loads("\n".join(_json_lines(fields)))  # the record itself is valid JSON ...
        try:  # ... and the broken one is not
            json.loads("\n".join(lines))
        except json.JSONDecodeError:
            pass
        else:
            raise RuntimeError(f"{hint}: still parses")
        ask = rng.choice(FIX_JSON_TEMPLATES).format(thing=thing, system=system, hint=hint)
        return f"{ask}\n\n```json\n" + "\n".join(lines) + "\n```"

    return _distinct(make, PER_CATEGORY)


def gen_quote_summary(rng: random.Random) -> list[str]:
    order = list(range(len(wc.PASSAGES)))
    rng.shuffle(order)
    used: dict[int, set[int]] = {p: set() for p in order}
    prompts = []
    while len(prompts) < PER_CATEGORY:  # round after round over the passages, a new instruction each time
        for p in order:
            q = rng.choice([q for q in range(len(wc.QUOTE_INSTRUCTIONS)) if q not in used[p]])
            used[p].add(q)
            head = " ".join(x for x in (rng.choice(wc.QUOTE_CONTEXTS), wc.QUOTE_INSTRUCTIONS[q]) if x)
            prompts.append(f"{head}\n\n{wc.PASSAGES[p]}")
            if len(prompts) == PER_CATEGORY:
                break
    return prompts


# --- extract-fields: documents with slots filled from pools


def _doc_invoice(rng):
    vendor, client = rng.sample(wc.COMPANIES, 2)
    d = _date(rng, 2024)
    items = rng.sample(wc.PRODUCTS, 3)
    qty = [rng.randint(1, 12) for _ in items]
    sub = sum(q * c for q, (_, c) in zip(qty, items, strict=True)) / 100
    vat = round(sub * 0.2, 2)
    text = (f"INVOICE\nInvoice No.: INV-{d[0]}-{rng.randint(100, 99999):05d}\nDate issued: {_long(d)}\n"
            f"Vendor: {vendor}\nBill to: {client}, {rng.randint(1, 99)} {rng.choice(wc.STREETS)}, "
            f"{rng.choice(wc.CITIES)}\nDescription: " + ", ".join(f"{q} x {n}" for q, (n, _) in
                                                               zip(qty, items, strict=True))
            + f"\nSubtotal: {sub:.2f} GBP\nVAT (20%): {vat:.2f} GBP\nTotal due: {sub + vat:.2f} GBP\n"
            f"Payment terms: Net {rng.choice([14, 30, 45])}\nContact: accounts@example.com")
    return "invoice", text, ["invoice_number", "invoice_date", "vendor", "bill_to", "total_due", "payment_terms"]


def _doc_email(rng):
    (f1, l1), (f2, l2) = _person(rng), _person(rng)
    d = _date(rng, 2024)
    room = rng.choice(["Birch Room", "Cedar Room", "Board Room", "Studio 2"])
    topic = rng.choice(["Quarterly planning session", "Website relaunch kick-off", "Budget review", "Team offsite"])
    text = (f"From: {f1} {l1} <{_email(f1, l1)}>\nTo: {f2} {l2} <{_email(f2, l2)}>\n"
            f"Date: {rng.choice(wc.WEEKDAYS)[:3]}, {d[2]} {wc.MONTHS[d[1] - 1][:3]} {d[0]} "
            f"{rng.randint(7, 18):02d}:{rng.randint(0, 59):02d}\nSubject: {topic}\n\nHi {f2},\n\n"
            f"The {topic.lower()} is confirmed for {rng.choice(wc.WEEKDAYS)} {rng.randint(1, 28)} "
            f"{wc.MONTHS[d[1] % 12]} at {rng.randint(9, 16)}:{rng.choice(['00', '15', '30'])}. We will meet in the "
            f"{room}. Could you please send me {rng.choice(['the updated budget spreadsheet', 'your slides', 'the guest list', 'the draft agenda'])} "
            f"by {rng.choice(wc.WEEKDAYS)} so I can prepare copies?\n\nThanks,\n{f1}")
    return "email", text, ["from", "to", "subject", "meeting_date", "meeting_time", "location", "requested_action"]


def _doc_access_log(rng):
    ips = [f"{rng.choice(['203.0.113', '198.51.100', '192.0.2'])}.{rng.randint(2, 250)}" for _ in range(4)]
    paths = rng.sample(["/index.html", "/static/app.js", "/api/v1/orders", "/favicon.ico", "/login",
                        "/api/v1/search?q=lamp", "/img/logo.svg", "/api/v1/cart"], 4)
    bad = rng.randrange(4)
    day = f"{rng.randint(10, 28)}/{wc.MONTHS[rng.randrange(12)][:3]}/2024"
    lines = []
    for i in range(4):
        status = 500 if i == bad else rng.choice([200, 200, 304, 404])
        method = "POST" if paths[i].startswith("/api") and i == bad else "GET"
        lines.append(f'{ips[i]} - - [{day}:14:{2 * i:02d}:{rng.randint(10, 59)} +0000] "{method} {paths[i]} HTTP/1.1" '
                     f'{status} {rng.randint(0, 9000)} "-" "{rng.choice(["Mozilla/5.0 (X11; Linux x86_64)", "curl/8.5.0", "Mozilla/5.0 (Macintosh)"])}"')
    return ("web server log excerpt (use the single request that returned a 500 status)", "\n".join(lines),
            ["timestamp", "client_ip", "method", "path", "status", "response_bytes", "user_agent"])


def _doc_receipt(rng):
    items = rng.sample(wc.GROCERY_ITEMS, rng.randint(4, 6))
    prices = [rng.randint(99, 799) / 100 for _ in items]
    store = rng.choice(["GREENLEAF GROCERS", "HARBOUR MARKET", "THE CORNER PANTRY", "FENWAY FOODS"])
    d = _date(rng, 2024)
    lines = [f"{store} - {rng.choice(['Riverside', 'Old Town', 'Station Road', 'Northgate'])} Branch",
             f"Receipt #: {rng.randint(1, 99):04d}-{rng.randint(100000, 999999)}",
             f"Date: {d[2]:02d}/{d[1]:02d}/{d[0]}   Time: {rng.randint(8, 21)}:{rng.randint(0, 59):02d}",
             f"Cashier: {rng.choice(wc.FIRST_NAMES)}", "-" * 30]
    lines += [f"{n} {q}".ljust(22) + f"${p:.2f}" for (n, q), p in zip(items, prices, strict=True)]
    lines += ["-" * 30, f"Items: {len(items)}", "TOTAL".ljust(22) + f"${sum(prices):.2f}",
              f"Paid by: {rng.choice(['Visa debit', 'Mastercard', 'Amex'])} ending {rng.randint(1000, 9999)}"]
    return "receipt", "\n".join(lines), ["store", "receipt_number", "date", "time", "cashier", "items_count",
                                         "total", "payment_method", "card_last_four"]


def _doc_ticket(rng):
    fn, ln = _person(rng)
    af, al = _person(rng)
    prod = rng.choice(["CloudNote Desktop 5.2", "PhotoVault 3.1 for Android", "Ledgerly Web", "TrailMap Pro 2.0"])
    issue = rng.choice(["App crashes when exporting notes to PDF", "Sync stops after changing password",
                        "Invoices show the wrong currency", "Offline maps fail to download"])
    text = (f"Ticket ID: SUP-{rng.randint(10000, 99999)}\nOpened: {_iso(_date(rng, 2024))} {rng.randint(0, 23):02d}:"
            f"{rng.randint(0, 59):02d} UTC\nCustomer: {fn} {ln}\nCustomer email: {_email(fn, ln)}\nProduct: {prod}\n"
            f"Priority: {rng.choice(['Low', 'Normal', 'High', 'Urgent'])}\nSummary: {issue}\n"
            f"Assigned to: {af} {al} (Tier {rng.randint(1, 3)})\nDetails: The customer reports the problem on "
            f"{rng.randint(2, 5)} devices. Reinstalling did not help.")
    return "support ticket", text, ["ticket_id", "opened", "customer", "customer_email", "product", "priority",
                                    "summary", "assigned_to"]


def _doc_booking(rng):
    fn, ln = _person(rng)
    d = _date(rng, 2024)
    nights = rng.randint(1, 5)
    price = nights * rng.choice([89, 109, 159, 189])
    text = (f"Dear {rng.choice(['Ms.', 'Mr.', 'Dr.'])} {fn} {ln},\n\nThank you for booking with us. Your confirmation "
            f"code is {rng.choice(string.ascii_uppercase)}{rng.choice(string.ascii_uppercase)}-{rng.randint(10000, 99999)}"
            f"-{rng.choice(string.ascii_uppercase)}.\n\nHotel: The {rng.choice(['Quayside', 'Larch', 'Beacon', 'Old Mill'])} "
            f"Hotel, {rng.randint(1, 60)} {rng.choice(wc.STREETS)}\nCheck-in: {_long(d)} (from 15:00)\n"
            f"Nights: {nights}\nRoom type: {rng.choice(['Superior Double, sea view', 'Standard Twin', 'Family Suite'])}\n"
            f"Total price: EUR {price}.00, breakfast {rng.choice(['included', 'not included'])}\n\n"
            f"We look forward to welcoming you. For changes, reply to reservations@example.com.")
    return "booking confirmation", text, ["guest_name", "confirmation_code", "hotel", "check_in", "nights",
                                          "room_type", "total_price"]


def _doc_shipping(rng):
    fn, ln = _person(rng)
    d = _date(rng, 2024)
    text = (f"SHIPPING CONFIRMATION\nYour order #{rng.choice(['WK', 'TD', 'HB'])}-{rng.randint(100000, 999999)} "
            f"has shipped.\nCarrier: {rng.choice(['Northway Parcel', 'Swift Post', 'Kestrel Freight'])}\n"
            f"Tracking number: NWP{rng.randint(10 ** 9, 10 ** 10 - 1)}GB\nShipped on: {_long(d)}\n"
            f"Recipient: {fn} {ln}\nDeliver to: Flat {rng.randint(1, 9)}{rng.choice('ABC')}, {rng.randint(1, 99)} "
            f"{rng.choice(wc.STREETS)}, {rng.choice(wc.CITIES)}\nPackage weight: {rng.randint(20, 900) / 100:.2f} kg\n"
            f"Questions? Write to support@example.com and quote your order number.")
    return "shipping notice", text, ["order_number", "tracking_number", "carrier", "ship_date", "recipient",
                                     "destination", "package_weight"]


def _doc_app_log(rng):
    svc = rng.choice(["billing", "search", "checkout", "notifications"])
    base = rng.randint(0x100000, 0xFFFFF0)
    code, msg = rng.choice([("TAX_TIMEOUT", "tax lookup timed out after 3 retries"),
                            ("DB_LOCK", "could not obtain row lock on orders"),
                            ("SMTP_REFUSED", "mail server refused the connection"),
                            ("CARD_DECLINED", "payment provider declined the card")])
    lines = [
        f"2024-07-02T09:15:03.114Z INFO  service={svc} request_id={base:x} msg=\"batch started\" count={rng.randint(20, 300)}",
        f"2024-07-02T09:15:04.902Z WARN  service={svc} request_id={base + 1:x} msg=\"slow response\" latency_ms={rng.randint(900, 4000)}",
        f"2024-07-02T09:15:05.377Z ERROR service={svc} request_id={base + 2:x} error_code={code} msg=\"{msg}\"",
        f"2024-07-02T09:15:06.010Z INFO  service={svc} request_id={base + 3:x} msg=\"batch finished\"",
    ]
    return ("application log excerpt (use the line with level ERROR)", "\n".join(lines),
            ["timestamp", "level", "service", "request_id", "error_code", "message"])


def _doc_job(rng):
    title = rng.choice(["Data Analyst", "Junior Backend Developer", "Office Manager", "Warehouse Supervisor",
                        "Community Librarian"])
    text = (f"{rng.choice(wc.COMPANIES)} is hiring!\nPosition: {title}\nLocation: {rng.choice(wc.CITIES)} "
            f"({rng.choice(['hybrid, 2 days in office', 'on site', 'fully remote'])})\nSalary: "
            f"{rng.randint(30, 70)},000 - {rng.randint(71, 95)},000 EUR per year\nContract: "
            f"{rng.choice(['Permanent, full time', 'Fixed term, 12 months', 'Part time, 24 hours a week'])}\n"
            f"Start date: {_long(_date(rng, 2025))}\nApply by: {_long(_date(rng, 2025))}\nReference: "
            f"JOB-{rng.randint(1000, 9999)}\nAbout the role: You will join a small team and report to the head "
            f"of {rng.choice(wc.DEPARTMENTS).lower()}.")
    return "job advert", text, ["position", "location", "salary", "contract", "start_date", "apply_by", "reference"]


def _doc_listing(rng):
    text = (f"FOR RENT: {rng.randint(1, 4)}-bedroom flat, {rng.randint(1, 120)} {rng.choice(wc.STREETS)}, "
            f"{rng.choice(wc.CITIES)}\nRent: {rng.randint(7, 25) * 100} EUR per month\nDeposit: two months' rent\n"
            f"Available from: {_long(_date(rng, 2025))}\nFloor area: {rng.randint(38, 140)} m2\nPets: "
            f"{rng.choice(['allowed', 'not allowed', 'cats only'])}\nHeating: {rng.choice(['gas', 'heat pump', 'district heating'])}\n"
            f"Agent: {' '.join(_person(rng))}, tel. +351 {rng.randint(200, 999)} {rng.randint(100, 999)} {rng.randint(100, 999)}")
    return "rental listing", text, ["address", "rent", "deposit", "available_from", "floor_area", "pets", "agent"]


def _doc_transfer(rng):
    (f1, l1), (f2, l2) = _person(rng), _person(rng)
    text = (f"PAYMENT NOTIFICATION\nWe have received a transfer to your account.\nAmount: "
            f"{rng.randint(20, 4000)}.{rng.randint(0, 99):02d} EUR\nFrom: {f1} {l1}\nTo: {f2} {l2}\n"
            f"IBAN (last 4): {rng.randint(1000, 9999)}\nReference: {rng.choice(['Rent', 'Invoice', 'Deposit', 'Refund'])} "
            f"{rng.randint(100, 999)}\nValue date: {_long(_date(rng, 2024))}\nTransaction ID: TX{rng.randint(10 ** 8, 10 ** 9 - 1)}")
    return "payment notification", text, ["amount", "sender", "recipient", "reference", "value_date",
                                           "transaction_id"]


def _doc_registration(rng):
    fn, ln = _person(rng)
    ev = rng.choice(["Open Data Meetup", "Regional Beekeeping Day", "Harbour 10K Run", "Spring Pottery Workshop"])
    text = (f"Registration confirmed\n\nHello {fn},\nyou are registered for {ev}.\nDate: {_long(_date(rng, 2025))}\n"
            f"Doors open: {rng.randint(8, 18)}:{rng.choice(['00', '30'])}\nVenue: {rng.choice(['The Granary', 'Town Hall', 'Pier Pavilion'])}, "
            f"{rng.choice(wc.CITIES)}\nTicket type: {rng.choice(['Standard', 'Concession', 'Volunteer'])}\n"
            f"Attendee number: {rng.randint(1, 600)}\nDietary note on file: {rng.choice(['none', 'vegetarian', 'nut allergy'])}\n"
            f"See you there,\nThe organising team")
    return "registration email", text, ["attendee", "event", "date", "doors_open", "venue", "ticket_type",
                                        "attendee_number"]


def _doc_service(rng):
    make = rng.choice(["Skoda Octavia", "Toyota Yaris", "Volvo V60", "Renault Clio"])
    text = (f"SERVICE RECORD\nVehicle: {make}, registration {rng.choice(string.ascii_uppercase)}{rng.choice(string.ascii_uppercase)}"
            f"{rng.randint(10, 99)} {''.join(rng.choice(string.ascii_uppercase) for _ in range(3))}\nMileage: "
            f"{rng.randint(10, 190)},{rng.randint(100, 999)} km\nDate: {_long(_date(rng, 2024))}\nWork done: "
            f"{', '.join(rng.sample(['oil and filter change', 'front brake pads', 'air filter', 'wiper blades', 'battery test', 'tyre rotation'], 3))}\n"
            f"Next service due: {rng.randint(10, 30)},000 km or {_long(_date(rng, 2025))}\nTechnician: {rng.choice(wc.FIRST_NAMES)}\n"
            f"Invoice total: {rng.randint(90, 900)}.00 EUR")
    return "service record", text, ["vehicle", "registration", "mileage", "date", "work_done", "next_service",
                                    "invoice_total"]


def _doc_abstract(rng):
    fn, ln = _person(rng)
    title = rng.choice(["Counting Birds with Cheap Microphones", "What Our Outage Log Taught Us",
                        "Teaching Statistics with Board Games", "Mapping Flood Risk from Old Photographs"])
    text = (f"Talk submission #{rng.randint(100, 999)}\nTitle: {title}\nSpeaker: {fn} {ln} "
            f"({rng.choice(wc.COMPANIES)})\nTrack: {rng.choice(['Data', 'Education', 'Operations', 'Environment'])}\n"
            f"Length: {rng.choice([20, 30, 45])} minutes\nLevel: {rng.choice(['Beginner', 'Intermediate', 'Advanced'])}\n"
            f"Abstract: In this talk I describe a small project that started as a weekend experiment and grew "
            f"into a tool used by {rng.randint(3, 40)} groups. I will share what worked, what did not, and the "
            f"numbers behind both.")
    return "conference talk submission", text, ["submission_number", "title", "speaker", "affiliation", "track",
                                                "length", "level"]


DOCS = [_doc_invoice, _doc_email, _doc_access_log, _doc_receipt, _doc_ticket, _doc_booking, _doc_shipping,
        _doc_app_log, _doc_job, _doc_listing, _doc_transfer, _doc_registration, _doc_service, _doc_abstract]
EXTRACT_TEMPLATES = [
    "Extract the following fields from the {doc} below and output them as `key: value` lines, one per line, "
    "copying each value exactly as it appears: {fields}.",
    "From the {doc} below, pull out {fields} and return them as a JSON object with exactly those keys. Copy the "
    "values verbatim, as strings.",
    "Fill in the template at the end with values copied character for character from the {doc}.",
    "Return a CSV with a header row ({fields}) and one data row taken from this {doc}. Copy the values exactly "
    "and quote any value that contains a comma.",
    "I need these fields from the {doc} for our records: {fields}. List them as `key: value` lines and copy every "
    "value exactly, without reformatting dates or amounts.",
]


def gen_extract_fields(rng: random.Random) -> list[str]:
    def make() -> str:
        doc, text, fields = rng.choice(DOCS)(rng)
        t = rng.choice(EXTRACT_TEMPLATES)
        ask = t.format(doc=doc, fields=", ".join(fields))
        if "template" in t:
            return f"{ask}\n\n{text}\n\nTEMPLATE\n" + "\n".join(f"{f}:" for f in fields)
        return f"{ask}\n\n{text}"

    return _distinct(make, PER_CATEGORY)


# --- list-transform: lists drawn from pools, transformations that fit each


def _list_sources(rng):
    """(kind, description, items) for one random list."""
    k = rng.randint(8, 14)
    f = rng.choice
    options = [
        ("text", "cities on a travel photographer's itinerary", rng.sample(wc.CITIES, k)),
        ("text", "ingredients from a recipe card", rng.sample(wc.INGREDIENTS, k)),
        ("text", "tasks from a checklist", rng.sample(wc.TASKS, k)),
        ("file", "filenames from a server's config folder", rng.sample(wc.FILENAMES, k)),
        ("text", "book titles for a library display", rng.sample(wc.BOOK_TITLES, k)),
        ("text", "subscriber email addresses", [_email(*_person(rng)) for _ in range(k)]),
        ("code", "product codes from a stock sheet", [f"KT-{rng.randint(1, 2999):04d}" for _ in range(k)]),
        ("pair", "countries and their capitals", [f"{a} - {b}" for a, b in rng.sample(wc.COUNTRIES, k)]),
        ("pair", "paint colours and their hex codes", [f"{a}: {b}" for a, b in rng.sample(wc.COLOURS, min(k, 12))]),
        ("pkg", "pinned Python dependencies", [f"{a}=={b}" for a, b in rng.sample(wc.PACKAGES, min(k, 12))]),
        ("pair", "tracks on an album with their durations", [f"{a} ({b})" for a, b in rng.sample(wc.SONGS, min(k, 10))]),
        ("grocery", "items on a shopping list", [f"{a}, {b}" for a, b in rng.sample(wc.GROCERY_ITEMS, min(k, 12))]),
        ("shop", "items in a shop's catalogue with their codes", [f"{a} ({b})" for a, b in rng.sample(wc.SHOP_ITEMS, min(k, 10))]),
        ("pair", "staff and their departments", [f"{' '.join(_person(rng))}, {f(wc.DEPARTMENTS)}" for _ in range(k)]),
    ]
    return rng.choice(options)


LIST_TRANSFORMS = {
    "any": [
        "Sort the following list alphabetically and return the complete sorted list, one entry per line, with "
        "every entry spelled exactly as given.",
        "Reverse the order of this list and return every entry, one per line, copied exactly.",
        "Number each line of the following list, starting at 1, using the format `1. ` before each line. Copy "
        "every line exactly and return the entire numbered list.",
        "Turn this list into a JSON array of strings, keeping the entries in the same order and copying each one "
        "exactly.",
        "Turn this list into a Markdown checklist: put `- [ ] ` in front of every line and change nothing else.",
        "Remove the duplicate entries from this list, keeping the first occurrence of each and preserving the "
        "original order. Return the whole de-duplicated list, one entry per line, copied exactly.",
        "Write every entry of this list in capital letters, one per line, in the same order.",
    ],
    "pair": [
        "Convert this list into a Markdown table with two columns and a header row. Copy every value exactly.",
        "Convert this list into CSV with a header row and two columns, one row per entry, values copied exactly.",
    ],
    "file": ["Add the suffix `.bak` to the end of every filename in this list, without changing anything else, and "
             "return the whole list in the same order, one filename per line."],
    "code": ["Sort these codes in ascending order by the number after the dash and return the complete sorted "
             "list, with each code copied exactly as written, including leading zeros, one per line."],
    "pkg": ["Change every `==` pin in this list to `>=`, keep the versions exactly as they are, and return the "
            "whole list sorted alphabetically by package name."],
    "grocery": ["Translate the item names in this shopping list into {lang}, keep each quantity exactly as "
                "written, and return the whole list in the same order and format."],
    "shop": ["Translate the product names in this list into {lang}. Keep every product code in brackets exactly "
             "as it is, and return the full list in the same order."],
}
LIST_INTROS = ["Here are some {desc}.", "The list below holds {desc}.", "A colleague sent me these {desc}.", "",
               "I'm tidying up a document with {desc}."]


def gen_list_transform(rng: random.Random) -> list[str]:
    def make() -> str:
        kind, desc, items = _list_sources(rng)
        pool = list(LIST_TRANSFORMS["any"]) + LIST_TRANSFORMS.get(kind, []) * 3
        t = rng.choice(pool)
        if "duplicate" in t:  # give the de-duplication something to do
            items = items + rng.sample(items, max(2, len(items) // 4))
            rng.shuffle(items)
        t = t.format(lang=rng.choice(["French", "Spanish", "German", "Portuguese", "Italian"]))
        intro = rng.choice(LIST_INTROS).format(desc=desc)
        return " ".join(x for x in (intro, t) if x) + "\n\n" + "\n".join(items)

    return _distinct(make, PER_CATEGORY)


# =========================================================================== free-form


def gen_chat(rng: random.Random) -> list[str]:
    cands = []
    for sit, q in wc.CHAT_PAIRS:
        context = sit if sit.startswith(("I ", "I'")) else sit[0].lower() + sit[1:]
        cands += [f"{sit} {q}", f"{q} For context: {context}"]
    for tip in wc.CHAT_TIPS:
        cands += [f"What are your best tips for {tip}?", f"Any advice on {tip}?"]
    cands += [f"How can I {a} without {b}?" for a, b in wc.CHAT_HOWTO]
    cands += list(wc.CHAT_OPEN)
    rng.shuffle(cands)
    # one framing per situation first, so the set is not two copies of the same questions
    firsts, seconds, seen = [], [], set()
    for c in cands:
        key = next((s for s, _ in wc.CHAT_PAIRS if s[:-1].lower() in c.lower()), None) or \
            next((t for t in wc.CHAT_TIPS if t in c), None) or c
        (seconds if key in seen else firsts).append(c)
        seen.add(key)
    return (firsts + seconds)[:PER_CATEGORY]


def gen_creative(rng: random.Random) -> list[str]:
    def make() -> str:
        form = rng.choice(wc.CREATIVE_FORMS)
        pair, topic = rng.choice(wc.CREATIVE_PAIRS)
        return form.format(
            n=rng.choice([150, 200, 250, 300]), k=rng.choice([3, 4, 5]), age=rng.choice([5, 6, 7, 8]),
            subject=rng.choice(wc.CREATIVE_SUBJECTS), narrator=rng.choice(wc.CREATIVE_NARRATORS),
            phenomenon=rng.choice(wc.CREATIVE_PHENOMENA), business=rng.choice(wc.CREATIVE_BUSINESSES),
            pair=pair, topic=topic,
        )

    return _distinct(make, PER_CATEGORY)


def gen_explanation(rng: random.Random) -> list[str]:
    concepts = list(wc.EXPLAIN_CONCEPTS)
    rng.shuffle(concepts)
    return [rng.choice(wc.EXPLAIN_FORMS).format(c=c) for c in concepts[:PER_CATEGORY]]


# --- reasoning: puzzles made by rules, each with exactly one answer


_SYLLOGISMS = [  # premises, question (valid and invalid forms alike: the model must tell which)
    ("All {a}s are {b}s, and all {b}s are {c}s.", "all {a}s are {c}s"),
    ("All {a}s are {b}s, and some {b}s are {c}s.", "some {a}s are {c}s"),
    ("No {a}s are {b}s, and all {c}s are {b}s.", "no {c}s are {a}s"),
    ("Some {a}s are {b}s, and no {b}s are {c}s.", "some {a}s are not {c}s"),
    ("All {a}s are {b}s, and no {c}s are {a}s.", "no {c}s are {b}s"),
    ("Some {a}s are {b}s, and some {b}s are {c}s.", "some {a}s are {c}s"),
]


def _syllogism(rng):
    a, b, c = rng.sample(wc.WORDS, 3)
    premises, claim = rng.choice(_SYLLOGISMS)
    return (premises.format(a=a, b=b, c=c) + f" Can we conclude that {claim.format(a=a, b=b, c=c)}? "
            "Explain why or why not.")


_EVENTS = [  # (what each did, the question's verb, "earlier" word, "later" word)
    ("finished the race", "finish", "before", "after"),
    ("arrived at the party", "arrive", "earlier than", "later than"),
    ("handed in the essay", "hand it in", "before", "after"),
    ("got to the station", "get there", "before", "after"),
]


def _ordering(rng):
    people = rng.sample(wc.FIRST_NAMES, rng.randint(4, 5))  # the true order
    did, verb, earlier, later = rng.choice(_EVENTS)
    clues = []
    for x, y in zip(people, people[1:], strict=False):
        clues.append(f"{x} {did} {earlier} {y}." if rng.random() < 0.5 else f"{y} {did} {later} {x}.")
    rng.shuffle(clues)
    names = sorted(people)
    return (f"{', '.join(names[:-1])} and {names[-1]} each {did}, at different times. " + " ".join(clues)
            + f" In what order did they {verb}? Explain how you worked it out.")


def _knights(rng):
    """Two islanders, knights always tell the truth, knaves always lie; one consistent answer."""
    a, b = rng.sample(wc.FIRST_NAMES, 2)
    statements = [
        (f"{b} is a knave.", lambda ka, kb: not kb),
        (f"{b} is a knight.", lambda ka, kb: kb),
        ("We are both knaves.", lambda ka, kb: not ka and not kb),
        ("We are both knights.", lambda ka, kb: ka and kb),
        ("At least one of us is a knave.", lambda ka, kb: not ka or not kb),
        (f"{b} and I are different kinds.", lambda ka, kb: ka != kb),
    ]
    statements_b = [
        (f"{a} is a knave.", lambda ka, kb: not ka),
        (f"{a} is a knight.", lambda ka, kb: ka),
        ("Exactly one of us is a knight.", lambda ka, kb: ka != kb),
        ("We are the same kind.", lambda ka, kb: ka == kb),
    ]
    for _ in range(200):
        sa, fa = rng.choice(statements)
        if rng.random() < 0.5:
            sols = [(ka, kb) for ka in (True, False) for kb in (True, False) if fa(ka, kb) == ka]
            text = f'{a} says: "{sa}"'
        else:
            sb, fb = rng.choice(statements_b)
            sols = [(ka, kb) for ka in (True, False) for kb in (True, False)
                    if fa(ka, kb) == ka and fb(ka, kb) == kb]
            text = f'{a} says: "{sa}" {b} says: "{sb}"'
        if len(sols) == 1:
            return (f"On an island, knights always tell the truth and knaves always lie. You meet {a} and {b}. "
                    f"{text} What is each of them? Explain your reasoning.")
    raise RuntimeError("no consistent knights-and-knaves puzzle")


def _deal(rng):
    item = rng.choice(["coffee beans", "printer paper", "dog food", "rice", "washing powder"])
    q1, q2 = rng.sample([250, 400, 500, 750, 1000, 1500, 2000], 2)
    p1, p2 = rng.randint(3, 30) + 0.49, rng.randint(3, 30) + 0.99
    extra = rng.choice(["", " Shop B also charges EUR 3.50 for delivery.", " Shop A's pack is only sold in pairs.",
                        " I use about 300 a week and the product keeps for a month."])
    unit = "g" if item != "printer paper" else " sheets"
    return (f"Shop A sells {item} at EUR {p1:.2f} for {q1}{unit}; shop B sells them at EUR {p2:.2f} for "
            f"{q2}{unit}.{extra} "
            "Which is the better deal for me, and why? Reason it through step by step.")


_CLASSICS = [
    "A farmer must carry a wolf, a goat and a cabbage across a river in a boat that holds only one item besides "
    "the farmer. How can everything cross safely? Explain each step.",
    "You have two ropes that each take exactly one hour to burn, but they burn unevenly. How can you measure "
    "exactly 45 minutes using only these ropes and a lighter?",
    "I have a one-day layover in a city with a museum, a famous market and a hilltop viewpoint. The market "
    "closes at noon and the museum is shut on Mondays. It's Monday. How should I plan my day?",
    "Three light switches outside a closed room control three bulbs inside. You may flip the switches as you "
    "like but enter the room only once. How can you tell which switch controls which bulb?",
    "You have a 3-litre jug and a 5-litre jug and a tap. How can you measure exactly 4 litres of water?",
    "A man looks at a portrait and says: 'Brothers and sisters I have none, but that man's father is my "
    "father's son.' Who is in the portrait? Explain.",
]


def gen_reasoning(rng: random.Random) -> list[str]:
    makers = [_syllogism] * 3 + [_ordering] * 4 + [_knights] * 3 + [_deal] * 2 + \
        [lambda r: r.choice(wc.DECISIONS).format(n=r.choice([2, 3, 4, 5, 6, 8, 10]))] * 2
    out = _distinct(lambda: rng.choice(makers)(rng), PER_CATEGORY - len(_CLASSICS))
    out += _CLASSICS
    rng.shuffle(out)
    return out


# --- math: word problems with numbers chosen so the answers come out clean


def _m_train(r):
    speed = r.choice([60, 72, 80, 84, 90, 96, 120])
    hours = r.choice([1.25, 1.5, 1.75, 2.5, 2.25, 3.5])
    h, m = r.randint(6, 16), r.choice([0, 5, 10, 15, 20, 30, 45])
    return (f"A train leaves a station at {h}:{m:02d} and travels {speed * hours:g} kilometres at an average speed "
            f"of {speed} km/h. At what time does it arrive? Show your work.")


def _m_discount(r):
    orig = r.choice([80, 120, 150, 160, 200, 240, 320])
    a, b = r.choice([(25, 10), (20, 10), (10, 20), (30, 20), (50, 10), (20, 25)])
    final = orig * (100 - a) * (100 - b) / 10000
    return (f"A shop discounts a jacket by {a}%, then takes a further {b}% off the reduced price. The final price "
            f"is ${final:g}. What was the original price? Show your reasoning.")


def _m_consecutive(r):
    n = r.choice([3, 4, 5])
    start = r.randint(5, 60) * 2
    kind = r.choice(["even", "odd"])
    start += 1 if kind == "odd" else 0
    total = sum(start + 2 * i for i in range(n))
    return (f"The sum of {n} consecutive {kind} numbers is {total}. What are the numbers? Show how you set up and "
            "solve the equation.")


def _m_rectangle(r):
    w = r.randint(4, 15)
    d = r.randint(2, 7)
    return (f"A rectangular garden is {d} metres longer than it is wide, and its area is {w * (w + d)} square "
            "metres. Find its dimensions, showing your work.")


def _m_interest(r):
    p, rate, years = r.choice([1000, 2000, 2500, 5000]), r.choice([3, 4, 5, 6]), r.choice([2, 3, 4])
    return (f"If you invest ${p:,} at {rate}% interest compounded annually, how much will you have after {years} "
            "years? Show the calculation year by year.")


def _m_marbles(r):
    a, b, c = r.randint(2, 7), r.randint(2, 7), r.randint(2, 7)
    col = r.choice(["red", "blue", "green"])
    return (f"A bag holds {a} red, {b} blue and {c} green marbles. If you draw two marbles without replacement, "
            f"what is the probability both are {col}? Show your work.")


def _m_pipes(r):
    a, b = r.choice([(6, 9), (4, 12), (3, 6), (10, 15), (5, 20), (12, 24)])
    return (f"Two pipes fill a tank in {a} hours and {b} hours respectively. How long do they take to fill it "
            "together? Explain each step.")


def _m_linear(r):
    x = r.randint(-6, 9)
    a, b, c = r.randint(2, 5), r.randint(1, 9), r.randint(2, 7)
    d = r.randint(1, a * 2 - 1)
    rhs = a * (c * x - b) + 4 - d * x
    sign = "+" if rhs >= 0 else "-"
    return f"Solve for x: {a}({c}x - {b}) + 4 = {d}x {sign} {abs(rhs)}. Show each step of your solution."


def _m_average(r):
    scores = [r.randint(60, 95) for _ in range(r.randint(3, 5))]
    target = r.randint(75, 88)
    return (f"My test scores so far are {', '.join(map(str, scores))}. What score do I need on the next test to "
            f"bring my average up to {target}? Explain your method.")


def _m_speed(r):
    v1, v2 = r.choice([(60, 90), (70, 80), (50, 100), (45, 75)])
    gap = (v1 + v2) * r.choice([1.5, 2, 2.5, 3])
    return (f"Two trains start {gap:g} km apart and travel towards each other at {v1} km/h and {v2} km/h. After "
            "how long do they meet, and how far has each travelled? Show your working.")


def _m_recipe(r):
    s1, s2 = r.choice([(4, 6), (4, 10), (6, 9), (2, 5), (8, 12)])
    g = r.choice([200, 250, 300, 450])
    return (f"A recipe for {s1} people needs {g} g of flour and 3 eggs. How much flour and how many eggs do I need "
            f"for {s2} people? Explain how you scale it and what you would do about a fraction of an egg.")


def _m_percent(r):
    old, new = r.choice([(40, 50), (80, 60), (125, 150), (250, 200), (64, 80), (1200, 1500)])
    thing = r.choice(["the price of a ticket", "the number of members in a club", "a monthly rent", "the daily "
                      "visitors to a museum"])
    return (f"Last year {thing} was {old}; this year it is {new}. By what percentage did it change? Then explain "
            "why a fall followed by a rise of the same percentage does not bring it back to the start.")


def _m_area(r):
    rad = r.randint(2, 12)
    return (f"A circular pond has a radius of {rad} metres, and a path 1 metre wide runs around it. What is the "
            "area of the path? Show your steps and give the answer to two decimal places.")


def _m_ages(r):
    k = r.choice([2, 3, 4])
    young = r.randint(4, 12)
    years = r.randint(3, 10)
    total = k * young + young + 2 * years
    return (f"Mia is {k} times as old as her brother Leo. In {years} years, the sum of their ages will be {total}. "
            "How old are they now? Set up the equations and solve them.")


MATH = [_m_train, _m_discount, _m_consecutive, _m_rectangle, _m_interest, _m_marbles, _m_pipes, _m_linear,
        _m_average, _m_speed, _m_recipe, _m_percent, _m_area, _m_ages]


def gen_math(rng: random.Random) -> list[str]:
    return _distinct(lambda: rng.choice(MATH)(rng), PER_CATEGORY)


GENERATORS: dict[str, Callable[[random.Random], list[str]]] = {
    "edit-code": gen_edit_code, "fix-json": gen_fix_json, "quote-summary": gen_quote_summary,
    "extract-fields": gen_extract_fields, "list-transform": gen_list_transform,
    "chat": gen_chat, "creative": gen_creative, "explanation": gen_explanation, "reasoning": gen_reasoning,
    "math": gen_math,
}


def build(set_name: str) -> list[dict[str, str]]:
    """One set's lines: categories interleaved, ids ``<set>-001`` ..."""
    cats = COPY_CATEGORIES if set_name == "copy" else FREE_CATEGORIES
    per = {c: GENERATORS[c](_rng(c)) for c in cats}
    for c, ps in per.items():
        if len(ps) != PER_CATEGORY or len(set(ps)) != PER_CATEGORY:
            raise RuntimeError(f"{c}: {len(set(ps))} distinct prompts, need {PER_CATEGORY}")
    rows = []
    for i in range(PER_CATEGORY):
        for c in cats:
            rows.append({"id": f"{set_name}-{len(rows) + 1:03d}", "category": c, "prompt": per[c][i]})
    return rows


TRAIN_PER_CATEGORY = 160
STDLIB_FORMS = [
    "Here is the documentation of Python's `{m}` module:\n\n{doc}\n\nSummarise what it is for in three sentences.",
    "What is Python's `{m}` module for? Its documentation begins:\n\n{doc}\n\nGive one short example of using it.",
    "Explain to a beginner when they would reach for Python's `{m}` module. The module says of itself: {doc}",
]


def _stdlib_prompts(rng: random.Random, n: int) -> list[str]:
    """Questions about the standard library's modules, from their docstrings' first paragraph."""
    import importlib
    import warnings

    names = sorted(m for m in sys.stdlib_module_names if not m.startswith("_") and m not in ("antigravity", "this"))
    out = []
    for m in names:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                doc = (importlib.import_module(m).__doc__ or "").strip()
        except Exception:  # noqa: BLE001 - a module this platform lacks (winreg, msvcrt, ...)
            continue
        para = " ".join(doc.split("\n\n")[0].split())
        if 40 <= len(para) <= 1200:
            out.append(rng.choice(STDLIB_FORMS).format(m=m, doc=para))
    rng.shuffle(out)
    return out[:n]


def evaluation_prompts(folder: Path = OUT) -> set[str]:
    """Every prompt of the bundled evaluation sets."""
    return {json.loads(line)["prompt"] for name in ("copy", "freeform", "json")
            for line in (folder / f"{name}.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()}


def build_train(per: int = TRAIN_PER_CATEGORY) -> list[dict[str, str]]:
    """The drafter's training prompts: every category's generator on the train seed, asked for
    ``per`` prompts (the categories drawn from fixed lists give what they have), minus every
    evaluation prompt; then the standard-library questions."""
    global PER_CATEGORY, _SPLIT
    evaluation = evaluation_prompts()
    saved = PER_CATEGORY, _SPLIT
    rows: list[dict[str, str]] = []
    try:
        _SPLIT = "train:"
        for c in COPY_CATEGORIES + FREE_CATEGORIES:
            try:
                PER_CATEGORY = per
                ps = GENERATORS[c](_rng(c))
            except RuntimeError:  # fewer distinct prompts than asked: take what 64 gives
                PER_CATEGORY = saved[0]
                ps = GENERATORS[c](_rng(c))
            rows += [{"category": c, "prompt": p} for p in dict.fromkeys(ps) if p not in evaluation]
    finally:
        PER_CATEGORY, _SPLIT = saved
    rows += [{"category": "stdlib", "prompt": p} for p in _stdlib_prompts(random.Random(f"{SEED}:train:stdlib"), per)]
    return [{"id": f"train-{i + 1:04d}", **r} for i, r in enumerate(rows)]


def render(rows: list[dict[str, str]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed files; exit 1 if they differ")
    ap.add_argument("--tokenizer", help="a local model folder: print prompt lengths in its tokens")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--train", type=Path, help="write the drafter's training prompts to this file instead")
    a = ap.parse_args(argv)
    if a.train:
        rows = build_train()
        a.train.parent.mkdir(parents=True, exist_ok=True)
        a.train.write_text(render(rows), encoding="utf-8")
        from collections import Counter

        print(f"{a.train}: {len(rows)} training prompts, none in an evaluation set "
              f"({dict(Counter(r['category'] for r in rows))})")
        return 0
    status = 0
    for name in ("copy", "freeform"):
        rows = build(name)
        text = render(rows)
        path = a.out / f"{name}.jsonl"
        if a.check:
            same = path.exists() and path.read_text(encoding="utf-8") == text
            print(f"{path}: {'up to date' if same else 'DIFFERS from the generator'}")
            status |= 0 if same else 1
        else:
            path.write_text(text, encoding="utf-8")
            print(f"{path}: {len(rows)} prompts")
        if a.tokenizer:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(a.tokenizer, local_files_only=True)
            chat = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False,
                                            add_generation_prompt=True) for r in rows]
            lens = sorted(len(tok(c, add_special_tokens=False)["input_ids"]) for c in chat)
            print(f"  tokens with chat template: min {lens[0]}, median {lens[len(lens) // 2]}, "
                  f"p95 {lens[int(0.95 * (len(lens) - 1))]}, max {lens[-1]}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
