"""Readers of plain-text triple files (``metaqa``, ``tsv``, ``entity-names``) and of the
``graph`` column of RoG question files (``rog``)."""
from __future__ import annotations

import json
from collections.abc import Iterator

from engine.errors import InvalidInputError, KGQAError
from engine.graph import NAME_RELATION, Literal, Triple
from engine.jsonl import parse_json
from engine.limits import TermCheck
from loaders.source import (
    BadLine,
    Item,
    Opened,
    PathOrSource,
    Reject,
    RelationNames,
    Source,
    check_id,
    numbered_lines,
    parse_lines,
)

# ---------------------------------------------------------------------------- plain text triples

def normalise_mid(node_id: str) -> str:
    """FB15k-237 writes Freebase ids as paths (``/m/027rn``); the RDF dump as ``m.027rn``."""
    if node_id.startswith(("/m/", "/g/")):
        return node_id[1] + "." + node_id[3:]
    return node_id


def read_metaqa(source: PathOrSource, *, check: TermCheck | None = None) -> Iterator[Item]:
    """Triples of MetaQA's ``kb.txt``: ``subject|relation|object``, all three taken verbatim
    (objects such as years and ratings are entity ids, as in the MetaQA questions)."""
    relation = RelationNames()

    def parse(line: str) -> Triple | None:
        fields = line.split("|")
        if len(fields) != 3:
            if not line.strip():
                return None
            raise BadLine(f"expected subject|relation|object, found {len(fields)} field(s)")
        return Triple(check_id(fields[0]), relation(fields[1]), check_id(fields[2]))

    return parse_lines(source, parse, check)


def read_tsv(source: PathOrSource, *, check: TermCheck | None = None) -> Iterator[Item]:
    """Triples of ``subject<TAB>relation<TAB>object`` files (FB15k-237, PathQuestion KBs).

    Freebase ids written as paths become RDF-dump ids (``/m/027rn`` → ``m.027rn``, ``/g/…``
    → ``g.…``); relation names stay verbatim (``/film/film/genre``).
    """
    relation = RelationNames()

    def parse(line: str) -> Triple | None:
        fields = line.split("\t")
        if len(fields) != 3:
            if not line.strip():
                return None
            raise BadLine(f"expected subject<TAB>relation<TAB>object, found {len(fields)} field(s)")
        s, r, o = fields
        return Triple(check_id(normalise_mid(s)), relation(r), check_id(normalise_mid(o)))

    return parse_lines(source, parse, check)


def read_entity_names(source: PathOrSource, *, check: TermCheck | None = None) -> Iterator[Item]:
    """``mid<TAB>name`` lines (FB15k-237 ``entity2text``) as English ``type.object.name`` triples."""

    def parse(line: str) -> Triple | None:
        fields = line.split("\t")
        if len(fields) != 2:
            if not line.strip():
                return None
            raise BadLine(f"expected id<TAB>name, found {len(fields)} field(s)")
        mid, name = fields
        if not name.strip():
            raise BadLine("empty name")
        return Triple(check_id(normalise_mid(mid)), NAME_RELATION, Literal.make(name, lang="en"))

    return parse_lines(source, parse, check)


# ---------------------------------------------------------------------------- RoG files

ROG_COLUMNS = ("id", "question", "answer", "q_entity", "a_entity", "graph")


def rog_rows(src: Source, columns: tuple[str, ...]) -> Iterator[tuple[int, str, dict] | Reject]:
    """(row number, row text for rejects, row) of a JSONL or parquet RoG file."""
    if src.binary().read(4) == b"PAR1":
        try:
            import pyarrow.parquet as pq
        except ImportError as e:
            raise InvalidInputError(
                f"{str(src.path)!r} is parquet: install pyarrow (pip install 'kgqa-engine[parquet]')"
            ) from e
        try:
            parquet = pq.ParquetFile(src.path)
        except Exception as e:  # pyarrow raises its own ArrowInvalid etc.
            raise InvalidInputError(f"cannot read parquet file {str(src.path)!r}: {e}") from e
        present = [c for c in columns if c in parquet.schema_arrow.names]
        n = 0
        for batch in parquet.iter_batches(batch_size=4096, columns=present):
            for row in batch.to_pylist():
                n += 1
                yield n, "", row
        return
    src.binary().seek(0)
    for item in numbered_lines(src):
        if item.__class__ is Reject:
            yield item  # type: ignore[misc]
            continue
        n, line = item  # type: ignore[misc]
        if not line.strip():
            continue
        try:
            row = parse_json(line)
        except ValueError as e:
            yield Reject(n, line, f"not a JSON object: {e}")
            continue
        if not isinstance(row, dict):
            yield Reject(n, line, "not a JSON object")
            continue
        yield n, line, row


def read_rog(source: PathOrSource, *, check: TermCheck | None = None) -> Iterator[Item]:
    """The ``graph`` triples ``[head, relation, tail]`` of every row of a RoG-style file
    (JSONL or parquet); every term is taken as an entity id. Rows share triples: the store
    deduplicates. A bad triple is rejected alone, with its row number."""
    relation = RelationNames()
    with Opened(source) as src:
        for item in rog_rows(src, ("id", "graph")):
            if item.__class__ is Reject:
                yield item  # type: ignore[misc]
                continue
            n, line, row = item  # type: ignore[misc]
            graph = row.get("graph")
            if not isinstance(graph, list):
                yield Reject(n, line or json.dumps({"id": row.get("id")}), "row has no 'graph' list")
                continue
            for edge in graph:
                try:
                    if not isinstance(edge, (list, tuple)) or len(edge) != 3 or not all(isinstance(t, str) for t in edge):
                        raise BadLine("graph entry is not [head, relation, tail] strings")
                    triple = Triple(check_id(edge[0]), relation(edge[1]), check_id(edge[2]))
                except (BadLine, KGQAError) as e:
                    yield Reject(n, json.dumps(edge, ensure_ascii=False), f"row {row.get('id')!r}: {e}")
                    continue
                why = None if check is None else check(triple)
                if why is None:
                    yield triple
                else:
                    yield Reject(n, json.dumps(edge, ensure_ascii=False), f"row {row.get('id')!r}: {why}", unstorable=True)
