"""``kgqa neo4j-import``: dump or dataset files as the CSV files of Neo4j's offline bulk importer
(``neo4j-admin database import full``), read by the same readers as ``kgqa load``, with the
rejected lines counted and listed; it prints the two command lines to run, the import with the
database stopped and then the schema (:mod:`loaders.neo4j_import`)."""
from __future__ import annotations

import argparse
import json

from engine.cli.common import add_output_arguments, add_reject_share_argument, reject_share
from engine.graph import FREEBASE_NS
from engine.results import to_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "neo4j-import",
        help="write dump or dataset files as neo4j-admin bulk-import CSV files",
        description="Write the triples of dump or dataset files (read as `kgqa load` reads them) as the CSV files "
        "of `neo4j-admin database import full` into --out, and print the command lines that import them and then "
        "create the schema. Lines that become no triple (malformed, or beyond what Neo4j keeps) are counted and written "
        "to rejects.tsv in --out.",
    )
    p.add_argument("files", nargs="+", help="files to convert (gzip or plain), all in one format")
    p.add_argument("--out", required=True, metavar="DIR", help="the import directory: a new or empty folder, or an earlier export's, which is replaced")
    p.add_argument("--format", default=None, help="ntriples, freebase, metaqa, tsv, entity-names, rog (default: from the file name)")
    p.add_argument("--namespace", default=FREEBASE_NS, help="namespace of ids in RDF input (default: Freebase's)")
    p.add_argument("--database", default="neo4j", help="the Neo4j database to import into (default neo4j)")
    add_reject_share_argument(p, "exporting")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_output_arguments(p)
    p.set_defaults(handler=_run_neo4j_import)


def _run_neo4j_import(args: argparse.Namespace) -> None:
    from loaders.neo4j_import import export_files

    plan = export_files(
        args.files, args.out, args.format, namespace=args.namespace, database=args.database, progress=not args.no_progress,
        max_reject_share=reject_share(args),
    )
    if args.json:
        print(json.dumps(to_json(plan), indent=2, ensure_ascii=False))
        return
    files = len(args.files)
    print(
        f"exported {plan.triples:,} triples ({plan.entities:,} entities, {plan.literals:,} literals) from {files} "
        f"file{'s' if files != 1 else ''} into {plan.directory} in {plan.seconds:.1f} s "
        f"({plan.duplicates:,} duplicates, {plan.rejected:,} rejected)"
    )
    if plan.rejects_file:
        print(f"rejected lines written to {plan.rejects_file}")
    for note in plan.notes:
        print(f"note: {note}")
    print(f"\nwith the database stopped, import:\n{plan.command_line}")
    print(f"\nthen, with it started, create the schema:\n{plan.schema_command_line}")
