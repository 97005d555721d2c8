"""Generate the bundled conversation set ``src/specnb/prompts/sets/edit-chat.jsonl``.

A conversation replay (issue 25 item 1) needs conversations whose later turns lean on earlier
ones, as a chat service's users do when they edit something step by step: the second turn asks
for a change to "the version above", the last asks to repeat the final version with one more
change. Each conversation opens with one of the bundled ``copy`` set's prompts (code to edit,
JSON to fix, a list to transform, fields to extract, a paragraph to quote) and goes on with
hand-written follow-ups that fit its category; even conversations have four turns, odd ones
three. No recorded answers: the set is replayed with the model's own answers
(``history = "model"``).

Turns are short so that a whole conversation with answers of 64 tokens stays well under the
CPU model's 2,048-token context (the unit tests bound the characters).

    python tools/make_conversations.py            # rewrite the file
    python tools/make_conversations.py --check    # exit 1 if the committed file differs
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src" / "specnb" / "prompts" / "sets" / "copy.jsonl"
OUT = ROOT / "src" / "specnb" / "prompts" / "sets" / "edit-chat.jsonl"
PER_CATEGORY = 4  # conversations per category: 5 categories, 20 conversations
SYSTEM = "You are a careful editing assistant. When asked for a full version, reply with all of it."

# follow-up turns per category of the opening prompt: each refers to the answer before it
FOLLOW_UPS = {
    "edit-code": [
        "Good. Now, in the version above, add a comment line just before the return statement that "
        "says what is returned. Reply with the full code only.",
        "Rename the function in that version by adding the prefix `checked_` to its name, and change "
        "nothing else. Reply with the full code only.",
        "Repeat the final version of the code exactly, with one more change: make its first line a "
        "comment that says `reviewed`. Reply with the full code only.",
    ],
    "fix-json": [
        "Thanks. In the corrected JSON above, set the value of the last field to null and return the "
        "whole object again.",
        "Now add a field \"checked\": true at the end of that object and return the whole object, every "
        "other field unchanged.",
        "Repeat the final version of the object exactly, with one more change: indent it with four "
        "spaces instead of two.",
    ],
    "quote-summary": [
        "Put the bullet points of your answer above in the opposite order, wording unchanged.",
        "Now add, as a last bullet, the first sentence of the original paragraph, quoted exactly.",
        "Repeat the final list of bullets exactly, with one more change: put each quoted sentence in "
        "double quotation marks.",
    ],
    "extract-fields": [
        "Now give the same fields and values as one JSON object, keys in the template's order.",
        "Add a key \"source\" with the value \"message\" at the end of that JSON object and return it whole.",
        "Repeat the final JSON object exactly, with one more change: sort its keys alphabetically.",
    ],
    "list-transform": [
        "Take the list from your answer above and reverse its order. Return the whole list, each line "
        "copied exactly.",
        "Now number the lines of that reversed list, starting at 1, and change nothing else.",
        "Repeat the final numbered list from your last answer exactly, with one more change: add the line "
        "`End of list` after the last item.",
    ],
}


def build() -> list[dict]:
    """The conversations, in the order the copy set interleaves its categories."""
    openers = [json.loads(line) for line in SOURCE.read_text(encoding="utf-8").splitlines() if line.strip()]
    taken: dict[str, int] = {}
    out = []
    for p in openers:
        cat = p["category"]
        if taken.get(cat, 0) >= PER_CATEGORY:
            continue
        taken[cat] = taken.get(cat, 0) + 1
        k = len(out)
        follow = FOLLOW_UPS[cat] if k % 2 == 0 else FOLLOW_UPS[cat][:1] + FOLLOW_UPS[cat][2:]
        out.append({"id": f"edit-chat-{k + 1:03d}", "category": cat, "system": SYSTEM,
                    "turns": [p["prompt"], *follow]})
        if len(out) == PER_CATEGORY * len(FOLLOW_UPS):
            break
    return out


def render(convs: list[dict]) -> str:
    return "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in convs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed file differs")
    args = ap.parse_args()
    text = render(build())
    if args.check:
        same = OUT.exists() and OUT.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{OUT} differs: run python tools/make_conversations.py")
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({len(text.splitlines())} conversations)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
