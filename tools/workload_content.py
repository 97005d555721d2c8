"""Hand-written content for the bundled prompt sets (read by tools/make_workloads.py).

Everything here was written for specnb: code snippets with the edits that make sense for
each, short passages to quote from, and the word pools the generator fills templates
with. No downloaded data. Names, addresses, e-mail addresses (example.com) and companies
are invented.
"""

from __future__ import annotations

# --------------------------------------------------------------------------- people, places, things

FIRST_NAMES = [
    "Marta", "Daniel", "Priya", "Oskar", "Lena", "Tomas", "Amara", "Hollis", "Juniper", "Rohan", "Grace",
    "Ines", "Yusuf", "Nadia", "Felix", "Ava", "Bruno", "Kenji", "Sofia", "Mateo", "Elif", "Tariq", "Hana",
    "Callum", "Freya", "Dmitri", "Leila", "Niamh", "Arjun", "Chiara", "Emeka", "Signe", "Paulo", "Mei",
    "Rosa", "Anders", "Zara", "Idris", "Ottilie", "Benedikt",
]
LAST_NAMES = [
    "Velasquez", "Okafor", "Anand", "Lindqvist", "Brightwater", "Reyes", "Fernwood", "Hale", "Mehta", "Tanaka",
    "Duarte", "Demir", "Okonkwo", "Marchetti", "Lindholm", "Castellanos", "Delgado", "Nakamura", "Moreau",
    "Kowalski", "Haddad", "Byrne", "Sorensen", "Novak", "Achebe", "Ferreira", "Costa", "Walsh", "Iyer",
    "Rossi", "Larsen", "Abara", "Quint", "Holloway", "Petrov", "Vance", "Aydin", "Keller", "Mbeki", "Ortega",
]
CITIES = [
    "Lisbon", "Oslo", "Nairobi", "Montreal", "Auckland", "Kyoto", "Bogota", "Helsinki", "Valparaiso",
    "Edinburgh", "Cape Town", "Reykjavik", "Buenos Aires", "Hobart", "San Sebastian", "Porto", "Tallinn",
    "Ljubljana", "Cork", "Trondheim", "Quebec City", "Wellington", "Da Nang", "Marrakesh", "Cusco",
    "Bergen", "Salzburg", "Galway", "Antwerp", "Tbilisi", "Halifax", "Dunedin", "Zanzibar City", "Hanoi",
    "Krakow", "Seville", "Gothenburg", "Bruges", "Victoria", "Adelaide",
]
STREETS = [
    "Quarry Lane", "Marram Street", "Harbour Row", "Birch Avenue", "Mill Road", "Larch Close", "Kiln Street",
    "Orchard Way", "Chapel Walk", "Ferry Road", "Salt Lane", "Willow Street", "Foundry Yard", "Beacon Hill",
    "Tannery Court", "Rope Walk", "Station Parade", "Copper Row",
]
COMPANIES = [
    "Bluefinch Office Supplies Ltd.", "Harrow & Pike Architects", "Northway Parcel", "Greenleaf Grocers",
    "Fernhill Logistics", "Quayside Hotel Group", "Cobalt Ridge Software", "Millbrook Print Works",
    "Saltmarsh Ceramics", "Tern & Dune Outfitters", "Ironbark Furniture Co.", "Lanternfly Studios",
    "Kestrel Analytics", "Brookline Dental Care", "Oakhaven Veterinary Clinic", "Harbourlight Books",
]
PRODUCTS = [
    ("Ceramic mug, 340 ml, sage green", 1250), ("Linen tea towel, striped", 890), ("Desk lamp, LED, matte black", 3499),
    ("Notebook A5, dotted, 120 pages", 675), ("Stainless water bottle, 750 ml", 2150), ("Wool socks, size 39-42", 1100),
    ("Cast iron skillet, 26 cm", 4590), ("Bamboo cutting board", 1875), ("USB-C cable, 2 m", 990),
    ("Canvas tote bag, natural", 1450), ("Beeswax candle, 3-pack", 1320), ("Garden trowel, ash handle", 1680),
    ("Wireless mouse, grey", 2499), ("Enamel pin, lighthouse", 450), ("Reading glasses case, cork", 760),
]
DEPARTMENTS = ["Finance", "Engineering", "Marketing", "Customer Support", "Operations", "Legal", "Design", "Research"]
TIMEZONES = ["Europe/Lisbon", "Europe/Oslo", "Africa/Nairobi", "America/Montreal", "Pacific/Auckland",
             "Asia/Tokyo", "America/Bogota", "Europe/Helsinki", "Australia/Hobart", "Europe/Dublin"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
BOOK_TITLES = [
    "The Copper Kettle", "Winter on Larch Island", "A Map of Quiet Rivers", "Seven Lanterns",
    "The Lamplighter's Ledger", "Glass Harbour", "A Season of Small Birds", "Northern Lights Over Vell",
    "The Last Ferry Home", "Morning at the Salt Flats", "Paper Boats", "The Salt Orchard", "Under the Tin Roof",
    "An Atlas of Lost Bells", "The Cartographer's Daughter", "Tidewater", "The Orchard Keeper's Almanac",
    "A Small Town Called Ember", "Iron and Thistle", "The Quiet Engine", "Letters from the Fen",
    "The Weaver of Hollow Street", "Blue Hour", "A Field Guide to Rain",
]
INGREDIENTS = [
    "2 cups plain flour", "1 tsp baking soda", "1/2 tsp salt", "3 ripe bananas, mashed", "1/2 cup melted butter",
    "3/4 cup brown sugar", "1 large egg, beaten", "1 tsp vanilla extract", "1/2 cup chopped walnuts",
    "200 g red lentils", "1 onion, diced", "2 carrots, grated", "1 tsp ground cumin", "1 litre vegetable stock",
    "2 cloves garlic, crushed", "400 g tinned tomatoes", "1 tbsp olive oil", "a handful of fresh parsley",
    "150 ml plain yoghurt", "1 lemon, zested", "250 g dried spaghetti", "100 g grated parmesan",
    "2 tbsp honey", "1 tsp smoked paprika",
]
TASKS = [
    "Check the tyre pressure on all four wheels", "Top up the windscreen washer fluid",
    "Test the headlights and indicators", "Inspect the wiper blades for cracks", "Confirm the spare tyre is inflated",
    "Check the engine oil level", "Pack the first aid kit", "Download offline maps for the route",
    "Charge the phone power bank", "Lock the roof box and store the key", "Draft the project proposal",
    "Book the venue for the workshop", "Send invitations to the steering group", "Order name badges and lanyards",
    "Prepare the slide template", "Confirm catering numbers", "Print the agenda", "Set up the feedback survey",
    "Arrange the room layout", "Water the tomato seedlings", "Renew the library books", "Defrost the freezer",
    "Back up the laptop to the external drive", "Email the landlord about the boiler",
]
FILENAMES = [
    "settings.yaml", "nginx.conf", "users.db", "crontab.txt", "backup_policy.md", "id_ed25519.pub",
    "requirements.txt", "docker-compose.yml", "README.md", "schema_v3.sql", "logrotate.conf", ".env.production",
    "ssl_cert_chain.pem", "invoice_template.docx", "q3_forecast.xlsx", "deploy.sh", "app.log", "package.json",
    "tsconfig.json", "Makefile", "fonts.css", "robots.txt", "sitemap.xml", "favicon.ico",
]
COUNTRIES = [
    ("Portugal", "Lisbon"), ("Norway", "Oslo"), ("Kenya", "Nairobi"), ("Canada", "Ottawa"), ("New Zealand", "Wellington"),
    ("Japan", "Tokyo"), ("Colombia", "Bogota"), ("Finland", "Helsinki"), ("Chile", "Santiago"), ("Iceland", "Reykjavik"),
    ("Argentina", "Buenos Aires"), ("Estonia", "Tallinn"), ("Slovenia", "Ljubljana"), ("Ireland", "Dublin"),
    ("Georgia", "Tbilisi"), ("Vietnam", "Hanoi"), ("Morocco", "Rabat"), ("Peru", "Lima"), ("Austria", "Vienna"),
    ("Poland", "Warsaw"),
]
COLOURS = [
    ("sage green", "#9CAF88"), ("harbour blue", "#2E5A88"), ("brick red", "#9C3B2E"), ("mustard", "#D4A017"),
    ("charcoal", "#36454F"), ("sand", "#C2B280"), ("plum", "#673147"), ("teal", "#2A7F7F"), ("coral", "#F0806B"),
    ("slate grey", "#6D7B8D"), ("moss", "#8A9A5B"), ("cream", "#FFFDD0"), ("ink", "#1B1F3B"), ("rust", "#B7410E"),
]
PACKAGES = [
    ("requests", "2.32.3"), ("numpy", "1.26.4"), ("pandas", "2.2.2"), ("aiohttp", "3.9.5"), ("pydantic", "2.7.1"),
    ("pytest", "8.2.0"), ("rich", "13.7.1"), ("httpx", "0.27.0"), ("click", "8.1.7"), ("jinja2", "3.1.4"),
    ("pyyaml", "6.0.1"), ("sqlalchemy", "2.0.30"), ("tqdm", "4.66.4"), ("psutil", "5.9.8"), ("orjson", "3.10.3"),
]
SONGS = [
    ("Harbour Lights", "3:42"), ("Slow River", "4:15"), ("Paper Moon Parade", "2:58"), ("Northbound", "5:03"),
    ("Kettle Song", "3:11"), ("Salt and Cedar", "4:47"), ("The Long Way Round", "6:02"), ("Glass Birds", "3:29"),
    ("Lantern Street", "4:01"), ("Tin Roof Rain", "2:44"), ("Quiet Engine", "3:55"), ("Ember", "4:33"),
]
GROCERY_ITEMS = [
    ("apples", "1 kg"), ("bread", "1 loaf"), ("milk", "2 litres"), ("eggs", "12"), ("cheese", "250 g"),
    ("tomatoes", "500 g"), ("rice", "1 kg"), ("coffee", "250 g"), ("onions", "3"), ("butter", "200 g"),
    ("lemons", "4"), ("potatoes", "2 kg"), ("carrots", "6"), ("olive oil", "1 bottle"), ("yoghurt", "500 g"),
]
SHOP_ITEMS = [
    ("Ceramic mug", "MUG-CER-340"), ("Tea towel", "TWL-LIN-050"), ("Desk lamp", "LMP-LED-221"),
    ("Notebook", "NBK-A5-120"), ("Water bottle", "BTL-STL-750"), ("Wool socks", "SCK-WOL-039"),
    ("Cutting board", "BRD-BMB-030"), ("Candle set", "CND-BEE-003"), ("Garden trowel", "TRW-ASH-011"),
    ("Tote bag", "BAG-CNV-001"), ("Picture frame", "FRM-OAK-A4"), ("Doormat", "MAT-COI-060"),
]
WORDS = ["bloop", "razzie", "lazzie", "florp", "quib", "zorlan", "mimsy", "tove", "snark", "wug", "dax", "fep",
         "glorp", "vint", "brillig", "jubjub", "plink", "skree"]


# --------------------------------------------------------------------------- code to edit

# Each snippet: language, a short description of where the code lives, the code, the name of
# its main function (or None), and edits that make sense for it (each a full instruction).
SNIPPETS = [
    dict(lang="python", where="a small reporting script", fn="sum_positive", code='''def sum_positive(values):
    tmp = 0
    for v in values:
        if v is None:
            continue
        if v > 0:
            tmp += v
    if tmp == 0:
        print("no positive values found")
    return tmp''', edits=[
        "Rename the variable `tmp` to `running_total` everywhere in this function, because the old name says "
        "nothing about what the value holds. Change nothing else.",
        "Replace the `print` call with a call to `logging.warning`, and add the `import logging` line above the "
        "function. Keep everything else as it is.",
        "Add type hints: the function takes a list of optional floats and returns a float. Keep the body unchanged.",
    ]),
    dict(lang="python", where="our order-processing service", fn="select_large_orders", code='''def select_large_orders(orders, minimum):
    selected = []
    for order in orders:
        amount = order.get("amount", 0.0)
        if amount >= minimum:
            selected.append(order["id"])
    selected.sort()
    return selected''', edits=[
        "Add type hints to every parameter and to the return value. The function takes a list of order "
        "dictionaries and a minimum amount as a float, and returns a list of order ids as strings. Keep the body "
        "exactly as it is.",
        "Change the comparison so that orders exactly equal to `minimum` are no longer selected (strictly greater "
        "than). Change nothing else.",
        "Rename the parameter `minimum` to `threshold_amount`, including every place it is used.",
    ]),
    dict(lang="javascript", where="a statistics helper in our dashboard", fn="average", code='''function average(numbers) {
  if (numbers.length === 0) {
    return 0;
  }
  let total = 0;
  for (let i = 0; i <= numbers.length; i++) {
    total += numbers[i];
  }
  return total / numbers.length;
}''', edits=[
        "This function reads one element past the end of the array. Fix the bug and leave everything else unchanged.",
        "Replace `let total` with `let sum` and update every use of the variable. Do not fix anything else.",
    ]),
    dict(lang="sql", where="a query behind the sales team's weekly report", fn=None, code='''SELECT
    c.customer_id,
    c.full_name,
    c.signup_date,
    c.region_id
FROM customers AS c
WHERE c.region_id = NULL
  AND c.is_active = TRUE
ORDER BY c.signup_date DESC
LIMIT 50;''', edits=[
        "This query should list customers who have never been assigned a sales region, but it returns no rows "
        "because of how it tests for a missing value. Fix the bug and keep every other line the same.",
        "Change the limit from 50 to 200 and sort by `c.full_name` ascending instead of by signup date. Keep the "
        "rest, including the formatting.",
        "Add the column `c.email` to the select list, right after `c.full_name`. Change nothing else.",
    ]),
    dict(lang="python", where="a tagging helper in our notes app", fn="add_tag", code='''def add_tag(tag, tags=[]):
    cleaned = tag.strip().lower()
    if not cleaned:
        return tags
    if cleaned not in tags:
        tags.append(cleaned)
    return tags


first = add_tag("Garden")
second = add_tag("Kitchen")''', edits=[
        "The default argument is a mutable list shared between calls, so tags leak from one call into the next. "
        "Fix it with the usual `None` default pattern.",
        "Rename the function `add_tag` to `append_tag`, including both places where it is called.",
    ]),
    dict(lang="javascript", where="the checkout page of our web shop", fn="calc", code='''const FREE_SHIPPING_THRESHOLD = 75;
const FLAT_RATE = 6.5;

function calc(subtotal, isExpress) {
  if (subtotal >= FREE_SHIPPING_THRESHOLD && !isExpress) {
    return 0;
  }
  const base = FLAT_RATE;
  return isExpress ? base * 2 : base;
}

const shipping = calc(cart.subtotal, cart.express);
console.log(`Shipping: ${shipping.toFixed(2)}`);''', edits=[
        "Rename the function `calc` to `calculateShipping`, including the place where it is called.",
        "Raise the free-shipping threshold from 75 to 90 and the flat rate from 6.5 to 7.25. Change nothing else.",
        "Convert `calc` into an arrow function assigned to a `const`, keeping its name and body.",
    ]),
    dict(lang="python", where="a sensor-monitoring tool", fn="find_max", code='''def find_max(readings):
    if not readings:
        raise ValueError("readings must not be empty")
    best = readings[1]
    for i in range(1, len(readings)):
        if readings[i] > best:
            best = readings[i]
    return best''', edits=[
        "This function ignores the first element, so it gives the wrong answer when the first element is the "
        "largest. Fix the bug and leave everything else unchanged.",
        "Rename `best` to `largest` and `readings` to `samples` everywhere. Do not fix anything else.",
    ]),
    dict(lang="sql", where="our monthly sales report", fn=None, code='''SELECT
    t.order_id,
    t.customer_id,
    t.total_amount,
    t.created_at
FROM orders AS t
WHERE t.status = 'shipped'
  AND t.created_at >= DATE '2024-01-01'
  AND t.total_amount > 100
ORDER BY t.created_at;''', edits=[
        "Rename the table alias `t` to `ord` throughout the query. Every column reference that uses the alias "
        "must be updated. Keep the indentation.",
        "Change the status filter from 'shipped' to 'delivered' and the amount threshold from 100 to 250. Keep "
        "everything else as it is.",
    ]),
    dict(lang="go", where="the configuration loader of a small Go service", fn="portFromEnv", code='''package config

import (
	"fmt"
	"os"
	"strconv"
)

func portFromEnv(name string, fallback int) (int, error) {
	raw := os.Getenv(name)
	if raw == "" {
		return fallback, nil
	}
	port, err := strconv.Atoi(raw)
	if err != nil {
		return 0, fmt.Errorf("%s is not a number: %v", name, err)
	}
	if port < 1 || port > 65535 {
		return 0, fmt.Errorf("%s out of range: %d", name, port)
	}
	return port, nil
}''', edits=[
        "Wrap the conversion error with `%w` instead of `%v` so callers can unwrap it. Change nothing else.",
        "Rename the function `portFromEnv` to `PortFromEnv` so it is exported. Keep the body identical.",
        "Rename the variable `raw` to `value` everywhere in the function.",
    ]),
    dict(lang="go", where="a retry helper used by our HTTP client", fn="retry", code='''func retry(attempts int, wait time.Duration, fn func() error) error {
	var err error
	for i := 0; i < attempts; i++ {
		err = fn()
		if err == nil {
			return nil
		}
		log.Printf("attempt %d failed: %v", i+1, err)
		time.Sleep(wait)
		wait = wait * 2
	}
	return fmt.Errorf("after %d attempts: %w", attempts, err)
}''', edits=[
        "Do not sleep after the last failed attempt: only sleep when another attempt will follow. Keep the rest.",
        "Rename the parameter `fn` to `operation` and update its use. Change nothing else.",
    ]),
    dict(lang="rust", where="a text-statistics command-line tool", fn="word_counts", code='''use std::collections::HashMap;

fn word_counts(text: &str) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for word in text.split_whitespace() {
        let cleaned = word.trim_matches(|c: char| !c.is_alphanumeric()).to_lowercase();
        if cleaned.is_empty() {
            continue;
        }
        *counts.entry(cleaned).or_insert(0) += 1;
    }
    counts
}''', edits=[
        "Rename the function `word_counts` to `count_words` and the variable `counts` to `tally`.",
        "Add a doc comment (`///`) above the function explaining what it returns. Keep the code unchanged.",
    ]),
    dict(lang="java", where="the pricing module of our booking system", fn="applyDiscount", code='''public class Pricing {
    private static final double MAX_DISCOUNT = 0.5;

    public static double applyDiscount(double price, double discount) {
        if (discount < 0) {
            throw new IllegalArgumentException("discount must not be negative");
        }
        if (discount > MAX_DISCOUNT) {
            discount = MAX_DISCOUNT;
        }
        double result = price * (1 - discount);
        return Math.round(result * 100) / 100;
    }
}''', edits=[
        "The rounding divides by an integer, so cents are lost. Divide by `100.0` instead. Change nothing else.",
        "Lower `MAX_DISCOUNT` from 0.5 to 0.3 and rename `result` to `discounted`. Keep everything else the same.",
    ]),
    dict(lang="typescript", where="the profile page of our web app", fn="displayName", code='''interface User {
  id: number;
  firstName: string;
  lastName: string;
  nickname?: string;
}

function displayName(user: User): string {
  if (user.nickname) {
    return user.nickname;
  }
  return user.firstName + " " + user.lastName;
}''', edits=[
        "Use a template literal instead of string concatenation in the last return statement. Change nothing else.",
        "Add an optional `email?: string;` field to the `User` interface, after `lastName`. Keep the rest as it is.",
        "Rename the interface `User` to `AccountHolder` everywhere it appears.",
    ]),
    dict(lang="bash", where="a nightly backup job on one of our servers", fn=None, code='''#!/usr/bin/env bash
set -euo pipefail

SRC_DIR=/srv/app/data
DEST_DIR=/mnt/backup/app
STAMP=$(date +%Y%m%d)

mkdir -p "$DEST_DIR"
tar -czf "$DEST_DIR/data-$STAMP.tar.gz" -C "$SRC_DIR" .
find "$DEST_DIR" -name 'data-*.tar.gz' -mtime +14 -delete
echo "backup written to $DEST_DIR/data-$STAMP.tar.gz"''', edits=[
        "Keep backups for 30 days instead of 14. Change nothing else in the script.",
        "Rename the variable `STAMP` to `TODAY` and update every place it is used.",
        "Change the destination folder to `/mnt/offsite/app`. Leave every other line untouched.",
    ]),
    dict(lang="c", where="a small string utility library", fn="reverse_in_place", code='''#include <string.h>

void reverse_in_place(char *s) {
    size_t len = strlen(s);
    if (len < 2) {
        return;
    }
    size_t i = 0;
    size_t j = len - 1;
    while (i < j) {
        char tmp = s[i];
        s[i] = s[j];
        s[j] = tmp;
        i++;
        j--;
    }
}''', edits=[
        "Add a check at the top that returns immediately when `s` is `NULL`. Keep everything else unchanged.",
        "Rename `tmp` to `swap` and the indices `i` and `j` to `left` and `right`.",
    ]),
    dict(lang="python", where="a script that summarises regional sales", fn="totals_by_region", code='''import csv


def totals_by_region(path):
    totals = {}
    with open(path) as fh:
        for row in csv.DictReader(fh):
            region = row["region"]
            amount = float(row["amount"])
            totals[region] = totals.get(region, 0) + amount
    return totals


if __name__ == "__main__":
    for region, total in sorted(totals_by_region("sales.csv").items()):
        print(region, round(total, 2))''', edits=[
        "Open the file with `newline=\"\"` and `encoding=\"utf-8\"`, as the csv module recommends. Change nothing else.",
        "Use `collections.defaultdict(float)` for `totals` instead of the `get` pattern, and add the import.",
        "Rename the function `totals_by_region` to `sum_by_region`, including the call at the bottom.",
    ]),
    dict(lang="python", where="the inventory module of a shop system", fn="InventoryItem", code='''from dataclasses import dataclass


@dataclass
class InventoryItem:
    sku: str
    name: str
    quantity: int
    unit_price: float

    def total_value(self):
        return self.quantity * self.unit_price

    def restock(self, amount):
        if amount <= 0:
            raise ValueError("amount must be positive")
        self.quantity += amount''', edits=[
        "Add return type hints to both methods and a type hint to `amount`. Keep the bodies unchanged.",
        "Add a field `location: str = \"main\"` after `unit_price`. Change nothing else.",
        "Rename the method `restock` to `add_stock`.",
    ]),
    dict(lang="python", where="a helper used by our data importers", fn="with_retries", code='''import time


def with_retries(func, attempts=3, delay=1.0):
    for attempt in range(1, attempts + 1):
        try:
            return func()
        except ConnectionError as exc:
            print(f"attempt {attempt} failed: {exc}")
            if attempt == attempts:
                raise
            time.sleep(delay)''', edits=[
        "Double the delay after each failed attempt (exponential backoff). Keep everything else as it is.",
        "Replace the `print` with `logger.warning`, and add `import logging` and "
        "`logger = logging.getLogger(__name__)` at the top.",
    ]),
    dict(lang="javascript", where="an old part of our front end", fn="loadProfile", code='''function loadProfile(userId, callback) {
  fetch("/api/users/" + userId)
    .then(function (response) {
      if (!response.ok) {
        throw new Error("HTTP " + response.status);
      }
      return response.json();
    })
    .then(function (data) {
      callback(null, data);
    })
    .catch(function (err) {
      callback(err);
    });
}''', edits=[
        "Replace the string concatenation in the URL and in the error message with template literals. Change "
        "nothing else.",
        "Rename `loadProfile` to `fetchProfile` and `userId` to `accountId`.",
    ]),
    dict(lang="css", where="the style sheet of our marketing site", fn=None, code='''.btn-primary {
  background-color: #2e5a88;
  color: #ffffff;
  padding: 10px 18px;
  border: none;
  border-radius: 4px;
  font-weight: 600;
}

.btn-primary:hover {
  background-color: #24466b;
}

.btn-primary:disabled {
  opacity: 0.5;
  cursor: not-allowed;
}''', edits=[
        "Rename the class `.btn-primary` to `.button-main` in all three rules. Change nothing else.",
        "Change the border radius to 8px and the padding to 12px 20px. Keep the other declarations as they are.",
    ]),
    dict(lang="yaml", where="the continuous-integration set-up of a Python project", fn=None, code='''name: tests
on:
  push:
    branches: [main]
  pull_request:
jobs:
  test:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.10"
      - run: pip install -e .[dev]
      - run: pytest -q''', edits=[
        "Change the Python version to \"3.12\". Leave every other line exactly as it is.",
        "Add a step `- run: ruff check .` between the install step and the test step, with the same indentation.",
    ]),
    dict(lang="python", where="a weather-station data cleaner", fn="to_fahrenheit", code='''def to_fahrenheit(celsius):
    return celsius * 1.8 + 32


def to_celsius(fahrenheit):
    return (fahrenheit - 32) / 1.8


def clean_readings(readings):
    cleaned = []
    for r in readings:
        if r is None or r < -90 or r > 60:
            continue
        cleaned.append(round(r, 1))
    return cleaned''', edits=[
        "Move the limits -90 and 60 into module-level constants `MIN_CELSIUS` and `MAX_CELSIUS` and use them. "
        "Change nothing else.",
        "Add a one-line docstring to each of the three functions. Keep the code unchanged.",
    ]),
    dict(lang="ruby", where="the receipt printer of a point-of-sale app", fn="receipt_total", code='''def receipt_total(items, tax_rate)
  subtotal = 0
  items.each do |item|
    subtotal += item[:price] * item[:qty]
  end
  tax = subtotal * tax_rate
  total = subtotal + tax
  total.round(2)
end''', edits=[
        "Replace the `each` loop with a single `sum` call over the items. Keep the rest of the method.",
        "Rename `tax_rate` to `vat_rate` and `tax` to `vat` everywhere in the method.",
    ]),
]

GENERIC_EDITS = [
    "Add a short comment above each function or rule explaining what it does. Do not change the code itself.",
    "Re-indent the code with {indent} spaces per level instead of its current indentation. Change nothing else.",
    "Rename `{fn}` to `{new_fn}` everywhere it appears. Change nothing else.",
]
NEW_NAMES = {
    "sum_positive": "total_of_positives", "select_large_orders": "pick_large_orders", "average": "mean",
    "add_tag": "remember_tag", "calc": "shippingCost", "find_max": "largest_reading",
    "portFromEnv": "readPort", "retry": "withRetry", "word_counts": "tally_words", "applyDiscount": "discounted",
    "displayName": "formatName", "reverse_in_place": "reverse_string", "totals_by_region": "region_totals",
    "InventoryItem": "StockItem", "with_retries": "retrying", "loadProfile": "getProfile",
    "to_fahrenheit": "celsius_to_fahrenheit", "receipt_total": "total_with_tax",
}
CODE_INTROS = [
    "This {lang_name} code is from {where}.",
    "Here is a piece of {where}, written in {lang_name}.",
    "A colleague asked for a small change to this {lang_name} code from {where}.",
    "The snippet below comes from {where}.",
    "",
]
CODE_OUTROS = [
    "Return the complete code in a single code block.",
    "Return the whole snippet, with the change applied, in one code block.",
    "Reply with the full updated code only.",
    "Return all of the code, not just the changed lines.",
]
LANG_NAMES = {"python": "Python", "javascript": "JavaScript", "sql": "SQL", "go": "Go", "rust": "Rust",
              "java": "Java", "typescript": "TypeScript", "bash": "Bash", "c": "C", "css": "CSS",
              "yaml": "YAML", "ruby": "Ruby"}


# --------------------------------------------------------------------------- passages to quote

PASSAGES = [
    "The old lighthouse on Gannet Rock was switched to automatic operation in the spring, and the last keeper, a "
    "quiet man who had lived there for nineteen years, rowed ashore for good. The town expected to feel relieved, "
    "since the keeper's cottage had been expensive to maintain. Instead, people found they missed the small lit "
    "window beside the great lamp. Fishermen said the rock looked emptier at night, even though the beam turned "
    "exactly as before. A group of volunteers now visits every Sunday to paint the railings and log the weather. "
    "They say the work is not really about the lighthouse at all, but about keeping a habit of care alive.",
    "When our neighbourhood turned an empty parking lot into a community garden, the first season was a mess. "
    "Nobody agreed on who should water the shared beds, and half the tomatoes split in a heat wave. By the second "
    "year, a simple rota on a chalkboard solved most of the arguments. Older residents taught younger ones how to "
    "save seeds, and children painted labels for every row. The garden now produces more vegetables than the "
    "members can eat, so the surplus goes to the school kitchen. What started as a plan to grow food turned into a "
    "way for strangers on the same street to learn each other's names.",
    "Sourdough baking rewards patience more than precision. The starter, a living mix of flour, water, wild yeast "
    "and bacteria, changes with the temperature of the kitchen and the flour it is fed. A recipe can suggest "
    "times, but the dough itself decides when it is ready. Experienced bakers learn to read small signs: a slight "
    "dome on the surface, a few bubbles at the edges, a gentle spring when pressed. Beginners often fail because "
    "they follow the clock instead of the dough. The good news is that even a dense first loaf teaches something, "
    "and each bake makes the next one a little easier to judge.",
    "The small software team at Fernhill Logistics used to release new versions once a quarter, and every release "
    "day felt like an emergency. Bugs piled up for months, and nobody remembered which change had caused which "
    "problem. Last year the team switched to shipping small updates every week. Each change was reviewed by one "
    "colleague and covered by at least one automated test. At first the weekly rhythm seemed tiring, but release "
    "days quickly became boring, which was exactly the goal. Customers noticed fewer outages, and the developers "
    "noticed they were sleeping better.",
    "Every autumn, millions of small songbirds cross the sea at night, flying for hours without a place to land. "
    "For a long time scientists wondered how such light birds could carry enough energy for the journey. Studies "
    "have shown that many species nearly double their body weight in the weeks before departure, storing fat the "
    "way a traveller packs food. They also shrink some internal organs that are not needed during flight, then "
    "rebuild them after arrival. Night travel keeps them cooler and away from many predators. Their journey is "
    "not a reckless gamble but a carefully prepared expedition.",
    "The public library in Millbrook nearly closed five years ago, when visitor numbers fell to their lowest level "
    "in decades. Rather than cutting hours, the new director asked residents what they actually needed. The "
    "answers surprised the staff: people wanted quiet places to work, help with online forms, and a room where "
    "teenagers could gather after school. The library rearranged its shelves, added long tables and power "
    "outlets, and started free weekly help sessions. Within two years, visits had more than doubled. The building "
    "now serves as the town's shared living room, open to anyone who walks through the door.",
    "Soil erosion rarely looks dramatic. On most farms it happens a few millimetres at a time, carried away by rain "
    "and wind so slowly that no single season seems to matter. Yet the topsoil that disappears took centuries to "
    "form, and it holds most of the nutrients crops depend on. Farmers who plant cover crops between harvests keep "
    "roots in the ground all year, which binds the soil and slows the water. Leaving crop residue on the surface "
    "has a similar effect. These practices cost time and money at first, but over a decade they protect the one "
    "resource a farm cannot buy back.",
    "The Willow Street footbridge was built in 1952 to connect the mill district with the new housing across the "
    "river. For decades it carried thousands of workers each morning, and its iron railings were polished smooth "
    "by their hands. When the mill closed, the bridge fell quiet and began to rust. Engineers recommended "
    "demolishing it, but residents launched a campaign to restore it instead. They raised money through bake "
    "sales, concerts and a sponsored walk. Today the repaired bridge is part of a riverside path used by cyclists, "
    "runners and families.",
    "The repair café in the basement of St Anne's hall opens on the first Saturday of every month. Volunteers with "
    "soldering irons, sewing machines and screwdrivers sit at folding tables, and anyone can bring a broken "
    "toaster, lamp or jacket. The rule is that the owner stays and watches, and usually helps. About two thirds of "
    "the items leave working again. The organisers keep a notebook of every repair, and they have noticed that "
    "the same faults appear again and again in cheap appliances. Last year they sent a summary to three "
    "manufacturers; one of them wrote back and changed a part.",
    "Night buses are the least glamorous part of a city's transport network and among the most important. The "
    "people who ride them are cleaners, nurses, bakers and bar staff, whose working days begin or end when the "
    "trains have stopped. When the council proposed cutting two night routes to save money, a survey found that "
    "most riders had no other way home. The routes were kept, but with fewer stops. Drivers say the night shift "
    "has its own community, with regulars who greet each other by name. For many passengers, the bus is the "
    "only calm half hour of their day.",
    "Keeping bees on city rooftops has become popular, and not only with hobbyists. Hotels, offices and schools "
    "now host hives and sell the honey as a local curiosity. Researchers warn that the enthusiasm has a cost. In "
    "some districts there are now more hives than the flowers nearby can feed, and honeybees compete with wild "
    "bees for the same pollen. The advice from ecologists is simple: before adding a hive, plant more flowers. A "
    "balcony of herbs or a strip of wildflowers along a car park does more for pollinators than another box of "
    "bees.",
    "The harbour ferry between Portside and Gull Island has run every hour since 1961, in all but the worst "
    "weather. Its crew of three know most passengers by sight, and the captain keeps a box of spare umbrellas "
    "under the bench. When the old boat failed its inspection, the operator considered replacing the service "
    "with a bridge. Islanders objected that a bridge would bring traffic and end the quiet that made the island "
    "worth living on. A new, electric ferry entered service last spring. It is faster and quieter, and the "
    "umbrellas are still under the bench.",
    "A secondary school in the valley asked its pupils to hand in their phones at the gate for one term, as an "
    "experiment. Teachers expected complaints, and there were many in the first week. By the second month, staff "
    "noticed that the playground was louder, with more games and more arguments, and the library was busier at "
    "lunchtime. Exam results did not change much. What changed, according to a survey at the end of term, was how "
    "pupils described their friendships: more of them said they had someone to talk to during the day. The school "
    "has decided to continue for another year.",
    "The county museum keeps two hundred thousand photographs in its basement, most of them never shown in public. "
    "Three years ago it began scanning them, one box at a time, with the help of retired volunteers. The slowest "
    "part is not the scanning but the captions: who is in the picture, where it was taken, and when. The museum "
    "now posts a mystery photograph online every week and asks the public for help. Relatives have identified "
    "grandparents, old shops and long-demolished streets. Each answer is checked against parish records before it "
    "is added to the catalogue.",
    "When the town painted cycle lanes on its two main roads, shopkeepers were worried. They believed most of "
    "their customers arrived by car and would stop coming if parking spaces disappeared. A count taken before and "
    "after the change told a different story. Most shoppers had always arrived on foot or by bicycle, and they "
    "visited more often than drivers, spending less each time but more over a month. Takings on the high street "
    "rose slightly in the first year. Some shopkeepers who opposed the lanes now ask for bicycle racks outside "
    "their doors.",
    "Handover between night and day shifts is one of the riskiest moments in a hospital ward. Information about a "
    "patient can be lost in a rushed conversation at seven in the morning. The nurses on one surgical ward "
    "introduced a short written checklist for every handover: allergies, medication changes, pending test results "
    "and any worries from the family. It takes about two minutes per patient. After six months, the number of "
    "missed medication doses on the ward had fallen by half. The nurses say the checklist also made handovers "
    "calmer, because nobody had to rely on memory alone.",
    "The wind farm on the ridge above Carrow was opposed by almost everyone in the village when it was first "
    "proposed. People feared the noise, the view and the lorries on the narrow lanes. Ten years later, opinion has "
    "shifted. The operator pays a yearly sum into a community fund, which has paid for a new roof on the village "
    "hall and a minibus for the primary school. Most residents say they no longer notice the turbines. A few "
    "still dislike them, and their objections about the view have not gone away. The turbines are due to be "
    "replaced with fewer, taller ones in 2031.",
    "Translating a novel is less like decoding a message and more like rewriting a song in another key. A "
    "translator must decide, sentence by sentence, whether to keep the exact meaning or the rhythm and tone. "
    "Jokes and puns are the hardest, because they rarely survive the crossing intact. Some translators add notes, "
    "while others invent a new joke that works in the target language. Readers seldom notice these choices, "
    "which is a sign that they were made well. The best translations read as if the book had been written in "
    "their language from the start.",
    "The volcano observatory on the island records thousands of tiny earthquakes every year, almost all of them "
    "too small to feel. Scientists watch for changes in the pattern rather than for single large events. A "
    "swarm of shallow tremors, a slight swelling of the ground, or a rise in gas from the vents can each be a "
    "warning. None of these signs is certain on its own, which makes the job as much about judgement as about "
    "instruments. When the alert level was raised last winter, nothing happened, and some residents complained. "
    "The observatory's director said that a false alarm is the price of never missing a real one.",
    "The chess club at the community centre meets every Tuesday evening, and its members range in age from eight "
    "to eighty-three. There is no fee and no ranking board. Beginners are paired with experienced players, who "
    "are asked to explain their moves aloud. The club's founder, a retired postman, says the rule changes the "
    "atmosphere more than anything else: winning matters less when you have to teach. Several children from the "
    "club now play in county tournaments. The oldest member still comes every week and has not lost a game to a "
    "child yet, though he admits it is getting harder.",
]
QUOTE_INSTRUCTIONS = [
    "Summarise the paragraph below by quoting, word for word, the two or three sentences that carry its main "
    "point. Put each quoted sentence on its own line inside quotation marks and do not paraphrase.",
    "Read the paragraph and summarise it using only its own sentences: copy the key sentences verbatim, in their "
    "original order, and add nothing of your own.",
    "Give a summary of the following text made entirely of direct quotations. Choose the three sentences that "
    "best capture its meaning and copy them exactly, including punctuation.",
    "Summarise this paragraph by quoting its most important sentences verbatim. Copy two to four sentences "
    "exactly as written, each on a new line, and do not reword them.",
    "Produce a quotation-only summary of the passage below: select the key sentences and reproduce them word for "
    "word, in order, without any added commentary.",
    "Summarise the paragraph by copying its key sentences exactly. Use between two and three sentences from the "
    "text, keep their wording and punctuation unchanged, and list them as bullet points.",
    "Write a one-sentence summary in your own words, then list the two sentences from the text that support it, "
    "quoted exactly.",
    "Which sentence of this passage states its conclusion, and which sentence gives the main evidence for it? "
    "Quote both sentences exactly, labelled `Conclusion:` and `Evidence:`.",
]
QUOTE_CONTEXTS = [
    "", "", "This is from a local newsletter.", "This paragraph will go into a briefing note.",
    "I am preparing a reading-group handout.", "We need the summary for a newsletter digest.",
]


# --------------------------------------------------------------------------- free-form pools

CHAT_PAIRS = [
    ("I just moved to a new city for work and don't know anyone here.",
     "What are some practical ways to start making friends as an adult?"),
    ("I'm thinking about picking up a musical instrument in my thirties.",
     "Is it too late, and how should I choose which one to learn?"),
    ("My houseplants keep dying even though I water them regularly.", "What might I be doing wrong?"),
    ("I get nervous before giving presentations at work.", "Can you give me some advice for handling stage fright?"),
    ("I've never made a budget before.", "What are some good habits for keeping my finances organised?"),
    ("My teenage son spends most evenings gaming in his room.", "How can I connect with him without nagging?"),
    ("I'm about to start my first job as a manager of a small team.", "What mistakes do new managers usually make?"),
    ("I want to run a 10 km race in four months, and I currently can't run for more than ten minutes.",
     "How should I build up?"),
    ("My partner and I keep arguing about household chores.", "How can we split them more fairly?"),
    ("I have a long-haul flight next week with a toddler.", "What should I pack and plan for?"),
    ("I'd like to read more books but always fall asleep after two pages.", "Any tips?"),
    ("I'm retiring next year after forty years in the same company.",
     "How do people usually find structure and purpose afterwards?"),
    ("My neighbour's dog barks for hours while they're at work.", "How should I bring it up with them?"),
    ("I want to learn to cook properly but only know how to make pasta.", "Where should I start?"),
    ("I've been offered a job that pays more but means a longer commute.", "How should I think about the decision?"),
    ("My elderly mother refuses to stop driving even though her eyesight is getting worse.",
     "How can I talk to her about it?"),
    ("I'm starting a vegetable patch on a small balcony.", "What is easy to grow for a beginner?"),
    ("I keep procrastinating on my thesis.", "What strategies actually help people get writing done?"),
    ("A close friend keeps cancelling plans at the last minute.", "How can I tell her it bothers me?"),
    ("I'm hosting a dinner for eight people, and two of them are vegan.", "How should I plan the menu?"),
    ("I want to get back into exercise after a long illness.", "How do I start without overdoing it?"),
    ("I'm learning Spanish with an app but can't hold a conversation.", "What should I change?"),
]
CHAT_TIPS = [
    "staying focused when working from home with lots of small distractions around",
    "sleeping better when my schedule changes every week",
    "keeping in touch with friends who live in different time zones",
    "making a small flat feel less cluttered",
    "preparing for a job interview in a field I'm new to",
    "saving money on groceries without eating the same thing every day",
    "getting children to help around the house",
    "remembering names when meeting lots of people at once",
    "travelling alone for the first time",
    "making long meetings more productive",
    "staying motivated to practise a hobby in winter",
    "writing a eulogy for a grandparent",
    "choosing a first car on a tight budget",
    "dealing with a noisy open-plan office",
    "getting through the first month with a new puppy",
    "planning a weekend in a city I've never visited",
]
CHAT_HOWTO = [
    ("politely tell a close friend that I can't lend them money again", "damaging our friendship"),
    ("say no to extra projects at work", "looking uncommitted"),
    ("cut down on coffee", "getting headaches"),
    ("give feedback to a colleague who talks over everyone in meetings", "embarrassing him"),
    ("ask for a raise", "sounding ungrateful"),
    ("reduce how much time I spend on my phone", "missing messages from my family"),
    ("keep a conversation going with someone I've just met", "asking too many questions"),
    ("leave a group chat that has become stressful", "offending anyone"),
    ("encourage my father to see a doctor", "making him defensive"),
    ("tidy up a shared kitchen at work", "becoming the office cleaner"),
]
CHAT_OPEN = [
    "What would you suggest for a relaxing weekend at home when the weather is bad and I want to avoid screens?",
    "Do you think it's better to have a few close friends or a large circle of acquaintances?",
    "What makes a good neighbour, in your view?",
    "If you could recommend one habit that makes everyday life easier, what would it be?",
    "Why do some people love early mornings while others can't stand them?",
    "What are some interesting ways to celebrate a birthday that don't involve a big party?",
    "How do you decide whether a disagreement is worth having?",
    "What are some good conversation starters for a family dinner with relatives I rarely see?",
]
CREATIVE_FORMS = [
    "Write a short story, about {n} words, about {subject}.",
    "Compose a poem of {k} stanzas about {subject}.",
    "Write a haiku sequence of {k} haiku about {subject}.",
    "Write a limerick about {subject}.",
    "Tell a bedtime story for a {age}-year-old about {subject}.",
    "Write the opening paragraph of a novel about {subject}.",
    "Write a short scene for a radio play about {subject}, with two speaking characters.",
    "Write a diary entry from the point of view of {narrator}.",
    "Write a letter from {narrator} to a friend, describing an ordinary day.",
    "Invent a myth explaining {phenomenon}, in the style of an old folk tale, in around {n} words.",
    "Write five catchy slogans for {business}.",
    "Write a short dialogue between {pair} who disagree about {topic}.",
]
CREATIVE_SUBJECTS = [
    "a lighthouse keeper who discovers that the fog has started answering back",
    "the first snowfall in a busy city, told from the point of view of a streetlamp",
    "a shy turtle who wants to join the forest's night-time choir",
    "a clockmaker who repairs a clock that runs backwards",
    "two strangers stuck in a lift during a thunderstorm",
    "a village where it has not rained for a hundred years",
    "a retired astronaut learning to garden",
    "a library book that keeps returning itself",
    "the last day of summer in a seaside town",
    "a fox who runs a night market",
    "a girl who can hear the thoughts of old houses",
    "a baker who bakes one loaf too many every morning",
    "a lost umbrella travelling around the world",
    "a robot learning to whistle",
    "an island that appears only at low tide",
    "a letter that arrives fifty years late",
    "a cat who is convinced it is the mayor",
    "the night shift at a train station",
]
CREATIVE_NARRATORS = [
    "a pigeon living on a cathedral roof", "a lighthouse", "a retired racehorse", "a snowman on its last day",
    "an old bicycle in a shed", "a ship's cat", "a library's oldest book", "a teenager on the first day at a new "
    "school", "a tree outside a hospital window", "a street musician",
]
CREATIVE_PHENOMENA = [
    "why the moon changes shape", "why rivers run to the sea", "why cats always land on their feet",
    "where the wind sleeps", "why the sea is salty", "why owls hunt at night", "how the stars got their names",
    "why autumn leaves change colour",
]
CREATIVE_BUSINESSES = [
    "a small neighbourhood bakery that only bakes bread before sunrise", "a bicycle repair shop run by twins",
    "a library that lends tools", "a dog-walking service for rainy days", "a floating café on a canal boat",
    "a second-hand bookshop in a lighthouse",
]
CREATIVE_PAIRS = [
    ("two robots on a cargo ship", "whether the ocean is beautiful"),
    ("a grandmother and her grandson", "whether letters are better than texts"),
    ("two pigeons on a statue", "who the statue was"),
    ("a chef and a food critic", "whether simple food can be great"),
    ("two astronauts", "what they miss most about Earth"),
    ("a snail and a hare", "what it means to be fast"),
]
EXPLAIN_CONCEPTS = [
    "how vaccines train the immune system to recognise a virus", "why the sky appears blue during the day but "
    "red at sunset", "the difference between a compiler and an interpreter", "how public-key cryptography lets "
    "strangers communicate securely", "what plate tectonics is and how it causes earthquakes",
    "how a hash table achieves fast lookups", "how the printing press changed the spread of ideas in Europe",
    "how a refrigerator keeps food cold", "what inflation is and why central banks worry about it",
    "how GPS works out where you are", "why we have seasons", "how photosynthesis turns light into sugar",
    "what a black hole is", "how noise-cancelling headphones work", "what DNA does in a cell",
    "why bread rises", "how a bill becomes law in a parliamentary system", "what causes tides",
    "how a credit score is calculated", "what entropy means in physics", "how antibiotics work and why "
    "resistance develops", "how a search engine ranks pages", "what a recession is", "how electric motors work",
    "why ice floats", "how the heart pumps blood", "what machine learning is", "how a bicycle stays upright",
    "how rainbows form", "what the greenhouse effect is", "how compound interest works", "why some metals rust",
    "what supply and demand mean", "how a nuclear power station generates electricity", "what a database "
    "index is", "how sound travels", "why the Roman Empire split into east and west", "how bees communicate",
    "what a virus is and how it differs from a bacterium", "how a camera lens focuses light",
    "how the internet routes a message from one computer to another", "what causes the northern lights",
    "how a lock and key work", "why airplanes can fly", "what the stock market is",
    "how the human eye sees colour", "how memory works in the brain", "why volcanoes erupt",
    "how a thermostat controls a heating system", "what the placebo effect is", "how wind turbines "
    "produce electricity", "how a microwave oven heats food", "what gravity is", "how coral reefs form",
    "what a recursion is in programming", "how translation apps translate text", "why the ocean has waves",
    "how yeast makes beer and bread", "what an atom is made of", "how a submarine dives and surfaces",
    "how elections with ranked-choice voting are counted", "what opportunity cost means",
    "how touchscreens detect a finger", "why leaves change colour in autumn", "how lightning forms",
    "what a carbon footprint is", "how a sewing machine makes a stitch", "what version control is",
]
EXPLAIN_FORMS = [
    "Explain {c}, in language a high-school student could follow.",
    "Explain {c} to a ten-year-old.",
    "Can you explain {c}? Please use a simple analogy.",
    "I've always wondered about {c}. Could you explain it in a few short paragraphs?",
    "Give a clear explanation of {c}, then mention one common misconception about it.",
    "Explain {c} as you would to a curious adult with no science background.",
]
DECISIONS = [
    "Compare renting versus buying a home for someone who expects to move cities within {n} years. What factors "
    "matter most, and what would you recommend?",
    "A team must choose between launching a product next week with known minor bugs or delaying {n} weeks to fix "
    "them. Lay out the trade-offs and suggest how to decide.",
    "A family of {n} is choosing between a small flat in the city centre and a house with a garden an hour away. "
    "What should they weigh up?",
    "A café owner can either extend opening hours into the evening or add a delivery service. She can afford only "
    "one this year. How should she reason about it?",
    "Plan a study schedule for a student with three exams in {n} days: history first, then chemistry, and maths "
    "last. Justify how you split the time.",
    "Should a small charity with {n} volunteers spend its grant on a paid coordinator or on equipment? Reason "
    "through both options.",
]
