"""``specnb schema``: write the point ledger's JSON Schema."""

from __future__ import annotations

import argparse
from pathlib import Path

from specnb import paths
from specnb.commands.common import Command
from specnb.ledger import SCHEMA_VERSION, schema_json


class Schema(Command):
    name = "schema"
    help = "write the ledger JSON Schema"

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--out", type=Path, default=paths.SCHEMAS)

    @staticmethod
    def run(a: argparse.Namespace) -> int:
        a.out.mkdir(parents=True, exist_ok=True)
        path = a.out / f"point-ledger.v{SCHEMA_VERSION}.json"
        path.write_text(schema_json())
        print(path)
        return 0
