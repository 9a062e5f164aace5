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
:func:`export_files` reads dump or dataset files as ``kgqa load`` does (``kgqa neo4j-import``).

Usage::

    plan = export_neo4j_import(triples, "import-dir")
    print(plan.command_line)         # run it with the database stopped (Neo4j 5)
    print(plan.schema_command_line)  # then, with it started, create the schema
"""
from __future__ import annotations

import fnmatch
import os
import re
import shlex
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from cypher.schema import NEO4J_SCHEMA, canonical_triple
from cypher.terms import literal_key
from engine import limits
from engine.errors import InvalidInputError, clipped
from engine.outputs import folder_replaced_whole, refuse_input_as_output
from engine.graph import FREEBASE_NS, NAME_RELATION, Literal, Triple
from engine.store import pick_name
from loaders.formats import detect_format, get_format
from loaders.load import (
    FORMAT_SAMPLE,
    FormatCheck,
    RejectsFile,
    check_paths,
    check_reject_share,
    is_rejects_file,
    verify_inputs,
)
from loaders.source import Reject

NODE_HEADER = ("id:ID(Entity)", "name", ":LABEL")
LITERAL_HEADER = ("key:ID(Literal)", "value", "datatype", "lang", ":LABEL")
ENTITY_EDGE_HEADER = (":START_ID(Entity)", ":END_ID(Entity)", ":TYPE")
LITERAL_EDGE_HEADER = (":START_ID(Entity)", ":END_ID(Literal)", ":TYPE")
#: relationship rows held per file before they are appended to it
FLUSH_ROWS = 50_000
#: where :func:`export_files` writes the lines it rejected, in the import directory
REJECTS_FILE = "rejects.tsv"
NODE_FILE, LITERAL_FILE, SCHEMA_FILE = "nodes.csv", "literals.csv", "schema.cypher"
#: what an export writes besides its relationship files (named as RELATION_FILES matches)
EXPORT_FILES = (NODE_FILE, LITERAL_FILE, SCHEMA_FILE)
RELATION_FILES = "rel-*.csv"


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
    #: input lines that became no triple (:func:`export_files`), and the file that lists them
    rejected: int = 0
    rejects_file: str | None = None
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


#: Neo4j 5's rule for a database name: 3 to 63 characters, an ASCII letter first, then ASCII
#: letters, digits, '.' and '-'
DATABASE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9.\-]{2,62}")


def check_database_name(database: str) -> str:
    """``database`` if Neo4j can create a database of that name, else an error saying its rule."""
    if not isinstance(database, str) or not DATABASE_NAME.fullmatch(database):
        raise InvalidInputError(f"invalid Neo4j database name {clipped(repr(database), 80)}: use 3 to 63 ASCII letters, "
                                "digits, '.' and '-', a letter first (e.g. neo4j or freebase)")
    return database


def export_neo4j_import(
    triples: Iterable[Triple], directory: str | Path, database: str = "neo4j", *, progress: bool = False
) -> Neo4jImport:
    """Write ``triples`` as neo4j-admin import files into ``directory`` (created if needed;
    an earlier export there is replaced) and return the command lines to run. A directory that
    holds anything else than an earlier export is refused (:func:`check_import_directory`).

    Duplicate triples are written once. Every triple is validated first (ids, relation,
    literal), so a bad one stops the export before the importer sees it. The files are written
    into a new folder beside ``directory`` that replaces it once they are all there: an export
    that fails leaves an earlier one as it was (:func:`engine.outputs.folder_replaced_whole`).
    """
    check_database_name(database)
    out = Path(directory)
    check_import_directory(out)
    with folder_replaced_whole(out, keep=_not_exported) as work:
        return _write_export(triples, work, out, database, progress)


def _not_exported(name: str) -> bool:
    """Whether a file of this name in an import directory is none an export writes."""
    return name not in (*EXPORT_FILES, REJECTS_FILE) and not fnmatch.fnmatchcase(name, RELATION_FILES)


def _write_export(triples: Iterable[Triple], work: Path, out: Path, database: str, progress: bool) -> Neo4jImport:
    """Write the files of an export into the empty folder ``work``; the plan names them in
    ``out``, where ``work`` is to be moved."""
    started = time.monotonic()
    names: dict[str, Literal | None] = {}
    literals: dict[str, Literal] = {}
    seen: set[Triple] = set()
    edges = _EdgeFiles(work)
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
    report.relationship_files = [str(out / Path(p).name) for p in edges.close()]

    with (work / NODE_FILE).open("w", encoding="utf-8") as f:
        f.write(_csv_line(NODE_HEADER))
        f.writelines(_csv_line((i, None if n is None else n.value, "Entity")) for i, n in names.items())
    with (work / LITERAL_FILE).open("w", encoding="utf-8") as f:
        f.write(_csv_line(LITERAL_HEADER))
        f.writelines(_csv_line((k, lit.value, lit.datatype, lit.lang, "Literal")) for k, lit in literals.items())
    (work / SCHEMA_FILE).write_text("".join(statement + ";\n" for statement in NEO4J_SCHEMA), encoding="utf-8")

    report.node_files = [str(out / NODE_FILE), str(out / LITERAL_FILE)]
    report.schema_file = str(out / SCHEMA_FILE)
    report.command = ["neo4j-admin", "database", "import", "full"]
    report.command += [f"--nodes={f}" for f in report.node_files]
    report.command += [f"--relationships={f}" for f in report.relationship_files]
    if any("\n" in lit.value or "\r" in lit.value for lit in literals.values()):
        report.command.append("--multiline-fields=true")
        report.notes.append("some literals span lines: --multiline-fields=true makes the import slower")
    report.command.append(database)
    report.schema_command = ["cypher-shell", "-d", database, "-f", report.schema_file]
    report.entities, report.literals, report.triples = len(names), len(literals), len(seen)
    report.seconds = time.monotonic() - started
    return report


def check_import_directory(out: Path, inputs: Iterable[Path] = ()) -> None:
    """Refuse an import directory that is or holds one of the ``inputs``, or that is neither
    new, empty nor an earlier export: one whose files of the names an export writes (and
    overwrites, or removes) all begin as an export writes them (:func:`_written_by_export`).
    Other files in an earlier export's directory stay as they are."""
    refuse_input_as_output(out, inputs, what="the import directory", option="--out")
    if out.exists() and not out.is_dir():
        raise InvalidInputError(f"the import directory {str(out)!r} is a file: name a new directory, or an earlier export's")
    if not out.is_dir():
        return
    names = sorted(os.listdir(out))
    exported = [n for n in names if not _not_exported(n)]
    foreign = [n for n in exported if not _written_by_export(out / n)]
    if foreign:
        raise InvalidInputError(
            f"the import directory {str(out)!r} holds {foreign[0]}, which no export wrote: an export there would overwrite "
            "or remove it; give --out a new or empty folder"
        )
    if names and not exported:
        shown = ", ".join(names[:3]) + (", …" if len(names) > 3 else "")
        raise InvalidInputError(
            f"the import directory {str(out)!r} is neither empty nor an earlier export (it holds {shown}); give --out a new "
            "or empty folder"
        )


def _written_by_export(path: Path) -> bool:
    """Whether the file ``path`` begins as the export writes the file of its name."""
    if not path.is_file() or path.is_symlink():
        return False
    if path.name == REJECTS_FILE:
        return is_rejects_file(path)
    starts = {
        NODE_FILE: (_csv_line(NODE_HEADER),),
        LITERAL_FILE: (_csv_line(LITERAL_HEADER),),
        SCHEMA_FILE: ("CREATE CONSTRAINT kgqa_",),
    }.get(path.name, (_csv_line(ENTITY_EDGE_HEADER), _csv_line(LITERAL_EDGE_HEADER)))
    with open(path, "rb") as f:
        head = f.read(256)
    return any(head.startswith(start.encode()) for start in starts)


def export_files(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    directory: str | Path,
    format: str | None = None,
    *,
    namespace: str = FREEBASE_NS,
    database: str = "neo4j",
    progress: bool = False,
    max_reject_share: float | None = 0.5,
) -> Neo4jImport:
    """:func:`export_neo4j_import` of the triples in dump or dataset files, read by the readers
    ``kgqa load`` uses: ``format`` for every file, else each file's own
    (:func:`loaders.formats.detect_format`); ``namespace`` for the RDF formats. Every file is
    checked before any is read (it exists; gzip data is intact to its end).

    A line that cannot become a triple, or whose triple Neo4j cannot keep
    (:data:`engine.limits.NEO4J`), is rejected: counted in ``rejected`` and written, as
    ``kgqa load`` writes them, to :data:`REJECTS_FILE` in ``directory`` (``rejects_file``;
    written only when there are rejects, and an earlier export's removed). As in ``kgqa load``,
    a file whose first lines are more than ``max_reject_share`` rejected is in another format than
    the one it is read as: the export stops. An export that stops leaves ``directory`` as it was
    and its rejects beside it, in ``<directory>.rejects.tsv`` (:func:`failed_rejects_path`).
    """
    files = check_paths(paths)
    check_reject_share(max_reject_share)
    check_database_name(database)
    readers = []
    for path in files:
        fmt = get_format(format if format is not None else detect_format(path))
        readers.append((path, fmt, {"namespace": namespace} if fmt.namespaced else {}))
    verify_inputs(files, progress)
    out = Path(directory)
    check_import_directory(out, files)
    beside = failed_rejects_path(out)
    refuse_input_as_output(beside, files, what="the rejects file", option="--out")
    if beside.is_file() and not is_rejects_file(beside):
        raise InvalidInputError(f"{str(beside)!r} is not the rejects file of an export that stopped: an export into "
                                f"{str(out)!r} would write its rejects there; move that file, or give --out another folder")
    beside.unlink(missing_ok=True)
    rejects = RejectsFile(beside, always=False)
    check = limits.term_check(limits.NEO4J)
    rejected = 0

    def triples() -> Iterator[Triple]:
        nonlocal rejected
        for path, fmt, options in readers:
            judge = FormatCheck(path, fmt, max_reject_share, rejects, verb="exported")
            seen = 0
            for seen, item in enumerate(fmt.read(path, check=check, **options), 1):
                if isinstance(item, Reject):
                    rejected += 1
                    rejects.write(path, item)
                    judge.rejected(item)
                else:
                    yield item
                if not judge.done and seen >= FORMAT_SAMPLE:
                    judge.judge(seen)
            judge.finish(seen)

    with folder_replaced_whole(out, keep=_not_exported) as work:
        try:
            plan = _write_export(triples(), work, out, database, progress)
        finally:
            rejects.close()
        if rejects.written:
            os.replace(beside, work / REJECTS_FILE)
            plan.rejects_file = str(out / REJECTS_FILE)
    plan.rejected = rejected
    return plan


def failed_rejects_path(directory: Path) -> Path:
    """Where an export into ``directory`` writes its rejects until it is complete, and where
    they stay when it stops: beside the folder, never in it (an earlier export is left whole)."""
    folder = Path(os.path.realpath(directory))  # on the file system of the folder that replaces it
    return folder.with_name(folder.name + ".rejects.tsv")
