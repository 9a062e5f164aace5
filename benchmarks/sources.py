"""Where the benchmark's graphs, questions and stores come from.

Everything the benchmarks take from the rest of the project — the dataset readers and the
load driver (``loaders``), the server launchers (``engine.servers``) — is reached through
this module only.
"""
from __future__ import annotations

import gzip
import math
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import InvalidInputError
from engine.graph import FREEBASE_NS, Literal, Triple
from engine.outputs import written_whole
from engine.results import LoadReport
from engine.servers import falkordb, virtuoso
from engine.servers.base import Server, ServerUnavailable
from engine.store import Store
from engine.stores.virtuoso_load import ISQL_OPTIONS
from loaders import datasets
from sparql.terms import Terms

SIZE_SUFFIXES = {"k": 1_000, "K": 1_000, "m": 1_000_000, "M": 1_000_000, "g": 1_000_000_000, "G": 1_000_000_000}
#: the largest graph the generator writes, in triples: it holds about 20 MB per million
#: triples while writing (about 2 GB here) and writes about 150k triples a second
MAX_GENERATED_TRIPLES = 100_000_000


@dataclass(frozen=True)
class Dataset:
    """A graph to benchmark on: the files the engine loads, and how to read them."""

    name: str
    files: tuple[Path, ...]
    format: str | None  # a loaders.formats format name; None: detect per file
    description: str
    triples: int = 0  # distinct triples, once known

    def read(self) -> Iterator[Triple]:
        """The dataset's triples (bad lines skipped), as the engine's readers see them."""
        from loaders.formats import read_triples
        from loaders.source import Reject

        for path in self.files:
            for item in read_triples(path, self.format):
                if not isinstance(item, Reject):
                    yield item


def parse_size(text: str) -> int:
    """``1M`` → 1_000_000, ``250k`` → 250_000, ``5000`` → 5000: a generated graph's size in
    triples, from 1 to :data:`MAX_GENERATED_TRIPLES`; else an :class:`InvalidInputError`."""
    stripped = text.strip()
    factor = SIZE_SUFFIXES.get(stripped[-1:], 1)
    number = stripped[:-1] if factor != 1 else stripped
    try:
        size = float(number) * factor
    except ValueError:
        size = math.nan
    if not 1 <= size <= MAX_GENERATED_TRIPLES:  # NaN and infinity fail it too
        raise InvalidInputError(
            f"graph size {text!r}: give a number of triples from 1 to {size_label(MAX_GENERATED_TRIPLES)}, "
            "k for thousands, M for millions (250k, 1M)"
        )
    return int(size)


def size_label(n: int) -> str:
    for suffix, factor in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= factor and n % (factor // 10) == 0:
            return f"{n / factor:g}{suffix}"
    return str(n)


def real_dataset(name: str, data_dir: Path | None = None) -> Dataset:
    """One of the real graphs in the datasets directory (:func:`loaders.datasets.data_dir`)."""
    data_dir = datasets.data_dir(data_dir)
    if name == "metaqa":
        return Dataset(name, (data_dir / "metaqa" / "kb.txt.gz",), "metaqa", "MetaQA WikiMovies KB (Zhang et al. 2018)")
    if name == "fb15k237":
        return Dataset(
            name, (data_dir / "fb15k237" / "train.txt.gz",), "tsv", "FB15k-237 train split, real Freebase MIDs"
        )
    if name == "pathquestion":
        folder = data_dir / "pathquestion"
        return Dataset(name, (folder / "2H-kb.txt", folder / "3H-kb.txt"), "tsv", "PathQuestion PQ-2H + PQ-3H KBs")
    raise InvalidInputError(f"unknown dataset {name!r}: use metaqa, fb15k237, pathquestion or gen:SIZE (e.g. gen:1M)")


def generated_dataset(size: int, seed: int, workdir: Path) -> Dataset:
    """A Freebase-shaped graph of about ``size`` triples, written once to an N-Triples file."""
    from benchmarks.generator import FreebaseGenerator

    name = f"gen-{size_label(size)}"
    path = workdir / "data" / f"{name}-seed{seed}.nt.gz"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        generator = FreebaseGenerator(size, seed=seed)
        started = time.perf_counter()
        write_ntriples(iter(generator), path)
        print(
            f"generated {name}: {generator.info.triples:,} triples, {generator.info.entities:,} topics, "
            f"{generator.info.cvts:,} CVTs in {time.perf_counter() - started:.0f} s → {path}",
            flush=True,
        )
    return Dataset(name, (path,), "ntriples", f"Freebase-shaped graph from the real schema, seed {seed}")


def dataset(spec: str, workdir: Path, seed: int, data_dir: Path | None = None) -> Dataset:
    """``metaqa``, ``fb15k237``, ``pathquestion`` or ``gen:SIZE``."""
    if spec.startswith("gen:"):
        return generated_dataset(parse_size(spec[4:]), seed, workdir)
    return real_dataset(spec, data_dir)


def write_ntriples(triples: Iterator[Triple], path: Path, namespace: str = FREEBASE_NS) -> int:
    """Write triples as (gzipped when the name ends in .gz) N-Triples in the engine's IRI scheme."""
    terms = Terms(namespace)
    iris: dict[str, str] = {}
    count = 0
    opener = gzip.open if path.suffix == ".gz" else open
    with written_whole(path) as tmp, opener(tmp, "wt", encoding="utf-8", newline="\n") as out:  # type: ignore[operator]
        for t in triples:
            r = iris.get(t.relation)
            if r is None:
                r = iris[t.relation] = terms.iri(t.relation)
            out.write(f"{terms.iri(t.subject)} {r} {terms.term(t.object)} .\n")
            count += 1
    return count


def ntriples_file(ds: Dataset, workdir: Path) -> Path:
    """The dataset as one plain N-Triples file (what native bulk loaders read)."""
    path = workdir / "data" / f"{ds.name}.nt"
    if ds.format == "ntriples" and len(ds.files) == 1 and ds.files[0].suffix == ".nt":
        return ds.files[0]
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        if ds.format == "ntriples" and len(ds.files) == 1 and ds.files[0].suffix == ".gz":
            with gzip.open(ds.files[0], "rb") as src, open(path, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        else:
            write_ntriples(ds.read(), path)
    return path


def count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def engine_load(store: Store, files: tuple[Path, ...] | list[Path], format: str | None) -> LoadReport:
    """Load through the engine's load driver, as ``kgqa load`` does."""
    from loaders.load import load_files

    return load_files(store, list(files), format, progress=False)


# ---------------------------------------------------------------------------- questions

@dataclass
class QuestionPath:
    """A dataset question reduced to what retrieval needs."""

    id: str
    topic: str
    path: list[str]
    answers: list[str] = field(default_factory=list)


def metaqa_questions(hops: int, data_dir: Path | None = None) -> list[QuestionPath]:
    """MetaQA dev questions of ``hops`` hops, each with its gold relation path."""
    from loaders.questions import metaqa_relation_path, read_metaqa_questions

    folder = datasets.data_dir(data_dir) / "metaqa" / f"{hops}-hop"
    out = []
    for q in read_metaqa_questions(folder / "qa_dev.txt", folder / "qa_dev_qtype.txt"):
        path = [relation for relation, _ in metaqa_relation_path(q.qtype or "")]
        out.append(QuestionPath(q.id, q.topic_entities[0], path, list(q.answer_entities)))
    return out


def pathquestion_questions(data_dir: Path | None = None) -> list[QuestionPath]:
    """PathQuestion PQ-2H and PQ-3H questions with their annotated relation paths."""
    from loaders.questions import read_pathquestion

    out = []
    for name in ("PQ-2H.txt", "PQ-3H.txt"):
        for q in read_pathquestion(datasets.data_dir(data_dir) / "pathquestion" / name):
            out.append(QuestionPath(q.id, q.topic_entities[0], list(q.path or []), list(q.answer_entities)))
    return out


# ---------------------------------------------------------------------------- servers

def virtuoso_sql(store: Store, sql: str) -> str:
    """Run SQL on the Virtuoso server behind ``store`` through isql, as its bulk loader does."""
    args = [store.isql_command, store.isql, store.user, store.password, *ISQL_OPTIONS]  # type: ignore[attr-defined]
    done = subprocess.run(args, input=sql, capture_output=True, text=True, check=False)
    output = done.stdout + done.stderr
    if "*** Error" in output:
        raise RuntimeError(f"isql on {store.isql}: {output.strip()[:500]}")  # type: ignore[attr-defined]
    return output


#: store kinds a run can start itself: kind → what starts its server
SERVERS: dict[str, Callable[..., Server]] = {"virtuoso": virtuoso.start, "bolt": falkordb.start}


def start_server(kind: str, workdir: Path, **options: Any) -> Server:
    """Start a throw-away server of ``kind`` (``options`` go to its starter); raise RuntimeError
    saying why it cannot start."""
    shutil.rmtree(workdir, ignore_errors=True)  # what an interrupted run left behind
    workdir.mkdir(parents=True)
    try:
        return SERVERS[kind](workdir, **options)
    except ServerUnavailable as e:
        raise RuntimeError(str(e)) from e


def bolt_script_load(store: Store, nt: Path, batch: int = 10_000) -> None:
    """What a user would write to load N-Triples over Bolt: parse with pyoxigraph, create the
    two indexes, then ``UNWIND $rows … MERGE`` per relationship type and object kind. Only the
    server address and the literal-node key are taken from the engine's store, so that both
    loads build the same graph; FalkorDB takes no Bolt parameters, so they are inlined."""
    from collections import defaultdict

    import neo4j
    import pyoxigraph as ox

    from cypher.compiler import inline_parameters
    from cypher.schema import literal_key

    terms = Terms(FREEBASE_NS)
    falkordb = getattr(store, "_falkordb", False)
    groups: dict[tuple[str, bool], list[list]] = defaultdict(list)
    with open(nt, "rb") as f:
        for quad in ox.parse(f, format=ox.RdfFormat.N_TRIPLES):
            rel = terms.id_of(quad.predicate.value)
            s = terms.id_of(quad.subject.value)
            o = quad.object
            if isinstance(o, ox.Literal):
                lit = Literal.make(o.value, o.datatype.value, o.language)
                groups[(rel, True)].append([s, literal_key(lit), lit.value, lit.datatype, lit.lang])
            else:
                groups[(rel, False)].append([s, terms.id_of(o.value)])
    host = store.uri.split("://", 1)[1].split("?", 1)[0]  # type: ignore[attr-defined]
    with neo4j.GraphDatabase.driver(f"bolt://{host}", auth=None) as driver, driver.session() as session:
        for statement in ("CREATE INDEX FOR (n:Entity) ON (n.id)", "CREATE INDEX FOR (n:Literal) ON (n.key)"):
            session.run(statement).consume()
        for (rel, literal), rows in groups.items():
            target = "(o:Literal {key: row[1]}) ON CREATE SET o.value = row[2], o.datatype = row[3], o.lang = row[4]"
            text = (
                "UNWIND $rows AS row MERGE (s:Entity {id: row[0]}) "
                + ("MERGE " + target if literal else "MERGE (o:Entity {id: row[1]})")
                + f" MERGE (s)-[:`{rel}`]->(o)"
            )
            for i in range(0, len(rows), batch):
                params = {"rows": rows[i:i + batch]}
                if falkordb:
                    session.run(inline_parameters(text, params)).consume()
                else:
                    session.run(text, params).consume()
    if falkordb:  # FalkorDB answers no new handshake after a client's GOODBYE until a bare connect
        address, _, port = host.rpartition(":")
        socket.create_connection((address, int(port)), timeout=10).close()
