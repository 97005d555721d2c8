"""``specnb schema``: write the point ledger's JSON Schema."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from specnb import paths
from specnb.commands.common import CliArgs, Command
from specnb.ledger import SCHEMA_VERSION, schema_json


@dataclass(frozen=True)
class SchemaArgs(CliArgs):
    """``specnb schema``'s arguments."""

    out: Path


class Schema(Command):
    name = "schema"
    help = "write the ledger JSON Schema"

    Args = SchemaArgs

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--out", type=Path, default=paths.SCHEMAS)

    @staticmethod
    def execute(a: SchemaArgs) -> int:
        a.out.mkdir(parents=True, exist_ok=True)
        path = a.out / f"point-ledger.v{SCHEMA_VERSION}.json"
        path.write_text(schema_json())
        print(path)
        return 0
