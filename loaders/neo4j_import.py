"""Export triples as CSV files for ``neo4j-admin database import full``, Neo4j's offline bulk
importer (far faster than MERGE over Bolt for a whole Freebase).

The files follow the layout of ``cypher/schema.py`` (what :class:`engine.stores.bolt.BoltStore`
writes), with two ID spaces so that an entity id can never be mistaken for a literal key:
- ``nodes.csv``: ``id:ID(Entity),name,:LABEL``, one row per entity, ``name`` its display name;
- ``literals.csv``: ``key:ID(Literal),value,datatype,lang,:LABEL``, one row per distinct literal;
- ``rel-NNNN-<relation>.csv``: ``:START_ID(Entity),:END_ID(Entity|Literal),:TYPE``, one file
  per relation and object kind.
Every non-null field is quoted, so that empty strings stay empty strings (an empty unquoted
field is null). ``schema.cypher`` holds the constraints and indexes to create after the import.

Usage::

    plan = export_neo4j_import(triples, "import-dir")
    print(plan.command_line)         # run it with the database stopped (Neo4j 5)
    print(plan.schema_command_line)  # then, with it started, create the schema
"""
from __future__ import annotations

import re
import shlex
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from cypher.schema import NEO4J_SCHEMA, canonical_triple
from cypher.terms import literal_key
from engine.graph import NAME_RELATION, Literal, Triple
from engine.store import pick_name

NODE_HEADER = ("id:ID(Entity)", "name", ":LABEL")
LITERAL_HEADER = ("key:ID(Literal)", "value", "datatype", "lang", ":LABEL")
ENTITY_EDGE_HEADER = (":START_ID(Entity)", ":END_ID(Entity)", ":TYPE")
LITERAL_EDGE_HEADER = (":START_ID(Entity)", ":END_ID(Literal)", ":TYPE")
#: relationship rows held per file before they are appended to it
FLUSH_ROWS = 50_000


@dataclass
class Neo4jImport:
    """The files written, the commands to run, and what went into them."""

    directory: str
    node_files: list[str]
    relationship_files: list[str]
    schema_file: str
    command: list[str]
    schema_command: list[str]
    entities: int = 0
    literals: int = 0
    triples: int = 0
    duplicates: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def command_line(self) -> str:
        return shlex.join(self.command)

    @property
    def schema_command_line(self) -> str:
        return shlex.join(self.schema_command)


def _csv_line(fields: Iterable[str | None]) -> str:
    return ",".join("" if f is None else '"' + f.replace('"', '""') + '"' for f in fields) + "\n"


def _better_name(best: Literal | None, candidate: Literal) -> Literal:
    """The display name of the two (see :func:`engine.store.pick_name`)."""
    if best is None or pick_name([best, candidate]) != best.value:
        return candidate
    return best


class _EdgeFiles:
    """Relationship rows, buffered per (relation, object kind) and appended to one file each."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.files: dict[tuple[str, bool], Path] = {}
        self.buffers: dict[tuple[str, bool], list[str]] = {}

    def add(self, relation: str, literal: bool, start: str, end: str) -> None:
        group = (relation, literal)
        if group not in self.files:
            safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", relation).strip("_.")[:80] or "relation"
            path = self.directory / f"rel-{len(self.files) + 1:04d}-{safe}.csv"
            path.write_text(_csv_line(LITERAL_EDGE_HEADER if literal else ENTITY_EDGE_HEADER), encoding="utf-8")
            self.files[group] = path
            self.buffers[group] = []
        buffer = self.buffers[group]
        buffer.append(_csv_line((start, end, relation)))
        if len(buffer) >= FLUSH_ROWS:
            self._flush(group)

    def _flush(self, group: tuple[str, bool]) -> None:
        with self.files[group].open("a", encoding="utf-8") as f:
            f.writelines(self.buffers[group])
        self.buffers[group].clear()

    def close(self) -> list[str]:
        for group in self.files:
            self._flush(group)
        return [str(p) for p in self.files.values()]


def export_neo4j_import(
    triples: Iterable[Triple], directory: str | Path, database: str = "neo4j", *, progress: bool = False
) -> Neo4jImport:
    """Write ``triples`` as neo4j-admin import files into ``directory`` (created if needed;
    files of an earlier export there are overwritten) and return the command lines to run.

    Duplicate triples are written once. Every triple is validated first (ids, relation,
    literal), so a bad one stops the export before the importer sees it.
    """
    started = time.monotonic()
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("rel-*.csv"):
        old.unlink()
    names: dict[str, Literal | None] = {}
    literals: dict[str, Literal] = {}
    seen: set[Triple] = set()
    edges = _EdgeFiles(out)
    report = Neo4jImport(str(out), [], [], "", [], [])
    for raw in tqdm(triples, desc="export", unit=" triples", disable=not progress):
        t = canonical_triple(raw)
        if t in seen:
            report.duplicates += 1
            continue
        seen.add(t)
        names.setdefault(t.subject, None)
        if isinstance(t.object, Literal):
            key = literal_key(t.object)
            literals[key] = t.object
            edges.add(t.relation, True, t.subject, key)
            if t.relation == NAME_RELATION:
                names[t.subject] = _better_name(names[t.subject], t.object)
        else:
            names.setdefault(t.object, None)
            edges.add(t.relation, False, t.subject, t.object)
    report.relationship_files = edges.close()

    node_file, literal_file = out / "nodes.csv", out / "literals.csv"
    with node_file.open("w", encoding="utf-8") as f:
        f.write(_csv_line(NODE_HEADER))
        f.writelines(_csv_line((i, None if n is None else n.value, "Entity")) for i, n in names.items())
    with literal_file.open("w", encoding="utf-8") as f:
        f.write(_csv_line(LITERAL_HEADER))
        f.writelines(_csv_line((k, lit.value, lit.datatype, lit.lang, "Literal")) for k, lit in literals.items())
    schema_file = out / "schema.cypher"
    schema_file.write_text("".join(statement + ";\n" for statement in NEO4J_SCHEMA), encoding="utf-8")

    report.node_files = [str(node_file), str(literal_file)]
    report.schema_file = str(schema_file)
    report.command = ["neo4j-admin", "database", "import", "full"]
    report.command += [f"--nodes={f}" for f in report.node_files]
    report.command += [f"--relationships={f}" for f in report.relationship_files]
    if any("\n" in lit.value or "\r" in lit.value for lit in literals.values()):
        report.command.append("--multiline-fields=true")
        report.notes.append("some literals span lines: --multiline-fields=true makes the import slower")
    report.command.append(database)
    report.schema_command = ["cypher-shell", "-d", database, "-f", str(schema_file)]
    report.entities, report.literals, report.triples = len(names), len(literals), len(seen)
    report.seconds = time.monotonic() - started
    return report
