"""Streaming readers for knowledge-graph dumps and KGQA dataset files.

Every triple reader is a generator over one file (plain or gzip, told apart by the magic
bytes) that yields :class:`~engine.graph.Triple` objects and, for a line that cannot become
a triple, a :class:`Reject` carrying its 1-based line number, so one bad line never stops a
load. Lines a reader filters out on purpose (comments, the Freebase filters) yield nothing.

| format | input |
|---|---|
| ``ntriples`` | W3C N-Triples |
| ``freebase`` | the Freebase RDF dump (tab-separated N-Triples terms, ``ns:`` prefixes allowed), filtered |
| ``metaqa`` | ``subject|relation|object`` (MetaQA ``kb.txt``) |
| ``tsv`` | ``subject<TAB>relation<TAB>object`` (FB15k-237, PathQuestion KBs) |
| ``entity-names`` | ``mid<TAB>name`` (FB15k-237 ``entity2text``) |
| ``rog`` | RoG question files (JSONL or parquet) with a per-question ``graph`` |

Question readers (``read_rog_questions``, ``read_metaqa_questions``, ``read_pathquestion``)
return :class:`Question` records; datasets are expected to be well formed, so they raise
:class:`~engine.errors.ParseError` instead of skipping a question.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Union
from urllib.parse import unquote

from engine.errors import (
    InvalidIdentifierError,
    InvalidInputError,
    KGQAError,
    ParseError,
)
from engine.graph import FREEBASE_NS, NAME_RELATION, XSD, Literal, Term, Triple
from engine.identifiers import validate_id, validate_relation


@dataclass(frozen=True)
class Reject:
    """A line that could not become a triple: where, what, and why."""

    line_no: int
    text: str
    reason: str


Item = Union[Triple, Reject]


@dataclass
class Question:
    """One dataset question with its gold answers.

    ``answers`` are the answer strings as the dataset gives them; ``answer_entities`` the
    answer node ids where the dataset names them. ``path`` is a gold relation path (all
    hops forward) where the dataset has one; ``qtype`` a question type (MetaQA).
    """

    id: str
    question: str
    answers: list[str]
    topic_entities: list[str]
    answer_entities: list[str]
    hops: int | None = None
    qtype: str | None = None
    path: list[str] | None = None


class _BadLine(Exception):
    """A line that cannot become a triple; the message is the reason."""


# ---------------------------------------------------------------------------- files

class Source:
    """A file opened for streaming: its raw lines (gzip undone) and the bytes consumed so far.

    ``tell()`` counts bytes of the file on disk (compressed bytes for gzip), so that
    progress can be measured against ``size``.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self._raw: IO[bytes] = open(self.path, "rb")
        except FileNotFoundError as e:
            raise InvalidInputError(f"input file {str(self.path)!r} does not exist") from e
        except IsADirectoryError as e:
            raise InvalidInputError(f"input {str(self.path)!r} is a directory; name the files in it") from e
        except OSError as e:
            raise InvalidInputError(f"cannot open input file {str(self.path)!r}: {e.strerror}") from e
        self.size = os.fstat(self._raw.fileno()).st_size
        self.compressed = is_gzip(self._raw)
        if self.path.suffix == ".gz" and self.size and not self.compressed:
            self._raw.close()
            raise InvalidInputError(f"input file {str(self.path)!r} ends in .gz but is not gzip data")
        self._lines: IO[bytes] = gzip.GzipFile(fileobj=self._raw, mode="rb") if self.compressed else self._raw

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._lines)

    def binary(self) -> IO[bytes]:
        """The decompressed byte stream."""
        return self._lines

    def tell(self) -> int:
        return self._raw.tell()

    def close(self) -> None:
        self._lines.close()
        self._raw.close()

    def __enter__(self) -> "Source":
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


PathOrSource = Union[str, os.PathLike, Source]


def is_gzip(stream: IO[bytes]) -> bool:
    """Whether a seekable binary stream starts with the gzip magic bytes (position kept)."""
    where = stream.tell()
    magic = stream.read(2)
    stream.seek(where)
    return magic == b"\x1f\x8b"


class _Opened:
    """Use a Source handed in as is (its owner closes it), or open and close a path."""

    def __init__(self, source: PathOrSource) -> None:
        self._owned = not isinstance(source, Source)
        self.source = Source(source) if self._owned else source  # type: ignore[arg-type]

    def __enter__(self) -> Source:
        return self.source

    def __exit__(self, *exc: object) -> None:
        if self._owned:
            self.source.close()


def _numbered_lines(src: Source) -> Iterator[tuple[int, str] | Reject]:
    """(line number, text without its line ending) per line; a Reject for undecodable bytes
    and, as the last item, for a file that cannot be read to its end (truncated gzip)."""
    n = 0
    try:
        for n, raw in enumerate(src, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                text = raw.decode("utf-8", "replace").rstrip("\r\n")
                yield Reject(n, text, f"not UTF-8 text ({e.reason} at byte {e.start})")
                continue
            line = line.rstrip("\r\n")
            if n == 1 and line.startswith("\ufeff"):
                line = line[1:]
            yield n, line
    except (OSError, EOFError, zlib.error) as e:
        # a truncated or corrupt gzip stream: keep what came before, say where it stopped
        yield Reject(n + 1, "", f"the file cannot be read past this point: {e}")


def _parse_lines(source: PathOrSource, parse: Callable[[str], Triple | str | None]) -> Iterator[Item]:
    """Drive a one-line parser over a file: ``parse`` returns a Triple, None to skip the
    line, or raises _BadLine / an identifier or literal error to reject it."""
    with _Opened(source) as src:
        for item in _numbered_lines(src):
            if item.__class__ is Reject:
                yield item  # type: ignore[misc]
                continue
            n, line = item  # type: ignore[misc]
            try:
                triple = parse(line)
            except (_BadLine, KGQAError) as e:
                yield Reject(n, line, str(e))
                continue
            if triple is not None:
                yield triple


class _Relations:
    """validate_relation with memory: datasets use few relations over many lines."""

    def __init__(self) -> None:
        self._ok: set[str] = set()

    def __call__(self, name: str) -> str:
        if name not in self._ok:
            validate_relation(name)
            self._ok.add(name)
        return name


def _check_id(node_id: str) -> str:
    # isprintable() is a fast test that passes almost every id; the exact rule is validate_id's
    if not node_id:
        raise _BadLine("empty id")
    if not node_id.isprintable():
        validate_id(node_id)
        try:
            node_id.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate, e.g. from a JSON \ud800 escape
            raise _BadLine(f"id {node_id!r} is not valid Unicode") from e
    return node_id


# ---------------------------------------------------------------------------- N-Triples

# The RDF 1.1 N-Triples grammar (https://www.w3.org/TR/n-triples/#n-triples-grammar).
_UCHAR = r"\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8}"
_IRI_CHARS = r'[^\x00-\x20<>"{}|^`\\]*'
# "unrolled" (plain run, then escape + plain run, repeated): linear time, no backtracking blow-up
_IRIREF = rf"<({_IRI_CHARS}(?:(?:{_UCHAR}){_IRI_CHARS})*)>"
_PN_CHARS_BASE = (
    "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u02ff\u0370-\u037d\u037f-\u1fff\u200c-\u200d"
    "\u2070-\u218f\u2c00-\u2fef\u3001-\ud7ff\uf900-\ufdcf\ufdf0-\ufffd\U00010000-\U000effff"
)
_PN_CHARS = _PN_CHARS_BASE + "_\\-0-9\u00b7\u0300-\u036f\u203f-\u2040"
_BLANK = rf"_:([{_PN_CHARS_BASE}_0-9](?:[{_PN_CHARS}.]*[{_PN_CHARS}])?)"
# "unrolled" so that a string without its closing quote fails in linear time
_STRING = r'"([^"\\\n\r]*(?:\\(?:[tbnrf"\'\\]|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8})[^"\\\n\r]*)*)"'
_LANGTAG = r"@([a-zA-Z]+(?:-[a-zA-Z0-9]+)*)"
_LITERAL = rf"{_STRING}(?:\^\^{_IRIREF}|{_LANGTAG})?"
# groups: 1 subject IRI, 2 subject blank, 3 predicate, 4 object IRI, 5 object blank,
# 6 string, 7 datatype, 8 language
_TRIPLE_LINE = re.compile(
    rf"[ \t]*(?:{_IRIREF}|{_BLANK})[ \t]*{_IRIREF}[ \t]*(?:{_IRIREF}|{_BLANK}|{_LITERAL})[ \t]*\.[ \t]*(?:#.*)?"
)
_IRI_BODY = re.compile(_IRIREF[2:-2])  # the part between the angle brackets
_IRIREF_ONLY = re.compile(_IRIREF)
_PREFIX_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]*|")  # Turtle PN_PREFIX, ASCII only; may be empty
_STRING_BODY = re.compile(_STRING[2:-2])  # the part between the quotes
_LANG_ONLY = re.compile(_LANGTAG[1:])
_BLANK_LABEL = re.compile(_BLANK[2:])
_ABSOLUTE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_ESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))")
_ECHAR = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f", '"': '"', "'": "'", "\\": "\\"}


def _unescape(text: str) -> str:
    """Undo ECHAR and UCHAR escapes (input already checked against the grammar).

    A UTF-16 surrogate pair written as two \\u escapes becomes one character; a lone
    surrogate or a code point beyond U+10FFFF is rejected: no store can hold it.
    """
    if "\\" not in text:
        return text

    def one(m: re.Match[str]) -> str:
        if m.group(3) is not None:
            if m.group(3) not in _ECHAR:
                raise _BadLine(f"invalid escape {m.group(0)}")
            return _ECHAR[m.group(3)]
        code = int(m.group(1) or m.group(2), 16)
        if code > 0x10FFFF:
            raise _BadLine(f"escape {m.group(0)} is beyond U+10FFFF")
        return chr(code)

    out = _ESCAPE.sub(one, text)
    if any("\ud800" <= c <= "\udfff" for c in out):
        try:
            out = out.encode("utf-16", "surrogatepass").decode("utf-16")
        except UnicodeDecodeError as e:
            raise _BadLine("escape of a lone UTF-16 surrogate") from e
    return out


class _Terms:
    """Turns N-Triples terms into node ids, relation names and literals for one namespace."""

    def __init__(self, namespace: str) -> None:
        if not isinstance(namespace, str) or not _ABSOLUTE.match(namespace):
            raise InvalidInputError(f"invalid namespace {namespace!r}: give an absolute IRI such as {FREEBASE_NS!r}")
        self.namespace = namespace
        self._cut = len(namespace)
        self.relation = _Relations()

    def iri(self, escaped: str) -> str:
        """A node id: the percent-decoded local name under the namespace, else the whole IRI."""
        iri = _unescape(escaped)
        if iri.startswith(self.namespace):
            local = iri[self._cut:]
            return _check_id(unquote(local) if "%" in local else local)
        if not _ABSOLUTE.match(iri):
            raise _BadLine(f"relative IRI <{iri}>: N-Triples needs absolute IRIs")
        return _check_id(iri)

    def predicate(self, escaped: str) -> str:
        name = self.iri(escaped)
        try:
            return self.relation(name)
        except InvalidIdentifierError as e:
            if name.startswith(("http:", "https:", "urn:")):
                raise _BadLine(
                    f"predicate <{name}> is outside the namespace <{self.namespace}>; "
                    "load with the graph's own namespace to keep it"
                ) from e
            raise

    def literal(self, escaped: str, datatype: str | None, lang: str | None) -> Literal:
        if datatype is not None:
            datatype = _unescape(datatype)
            if not _ABSOLUTE.match(datatype):
                raise _BadLine(f"relative datatype IRI <{datatype}>")
        return Literal.make(_unescape(escaped), datatype, lang)


def _diagnose(line: str) -> str:
    """A hint at what is wrong with a line the N-Triples pattern refused."""
    body = line.split(" #", 1)[0].rstrip(" \t")
    if not body.endswith("."):
        return "malformed N-Triples line: missing the final '.'"
    if body[0] == '"':
        return "malformed N-Triples line: a literal cannot be a subject"
    return "malformed N-Triples line: expected <subject> <predicate> <object> . with absolute IRIs, _:blank nodes or \"literals\""


def read_ntriples(
    source: PathOrSource, *, namespace: str = FREEBASE_NS, verbatim: Callable[[str], bool] | None = None
) -> Iterator[Item | str]:
    """Triples of a W3C N-Triples file.

    IRIs under ``namespace`` become bare ids and relation names (percent-decoded), other
    IRIs stay whole; blank nodes become ids ``_:label`` (labels are file-scoped in RDF:
    loading two files that reuse a label joins the nodes). Predicates must make valid
    relation names and literals must be well typed, else the line is rejected.

    ``verbatim`` (the loader's fast lane, :class:`sparql.ntriples.CanonicalNTriples`): a line
    it accepts is yielded as its text, unparsed, for a store that can take it as it is.
    """
    terms = _Terms(namespace)
    match = _TRIPLE_LINE.fullmatch
    predicates: dict[str, str] = {}  # escaped predicate IRI -> relation name

    def parse(line: str) -> Triple | str | None:
        if verbatim is not None and verbatim(line):
            return line
        m = match(line)
        if m is None:
            stripped = line.strip(" \t")
            if not stripped or stripped[0] == "#":
                return None
            raise _BadLine(_diagnose(stripped))
        s_iri, s_blank, p, o_iri, o_blank, string, datatype, lang = m.groups()
        subject = terms.iri(s_iri) if s_blank is None else "_:" + s_blank
        relation = predicates.get(p)
        if relation is None:
            relation = predicates[p] = terms.predicate(p)
        obj: Term
        if o_iri is not None:
            obj = terms.iri(o_iri)
        elif o_blank is not None:
            obj = "_:" + o_blank
        else:
            obj = terms.literal(string, datatype, lang)
        return Triple(subject, relation, obj)

    return _parse_lines(source, parse)


# ---------------------------------------------------------------------------- Freebase

#: dropped by ``read_freebase`` by default: the per-topic key strings and the permission
#: links, bookkeeping that no KGQA dataset asks about
DEFAULT_DROP_PREDICATES = ("type.object.key", "type.object.permission")
_DEFAULT_PREFIXES = {
    "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
    "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
    "owl": "http://www.w3.org/2002/07/owl#",
    "xsd": XSD,
    "key": "http://rdf.freebase.com/key/",
}


def _names(value: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """A tuple of names; one name alone is a one-name tuple, not its characters."""
    return (value,) if isinstance(value, str) else tuple(value)


def read_freebase(
    source: PathOrSource,
    *,
    namespace: str = FREEBASE_NS,
    languages: str | tuple[str, ...] | list[str] | None = ("en",),
    drop_domains: str | tuple[str, ...] | list[str] = (),
    drop_predicates: str | tuple[str, ...] | list[str] = DEFAULT_DROP_PREDICATES,
) -> Iterator[Item]:
    """Triples of the Freebase RDF dump, filtered the customary way.

    A line is ``subject<TAB>predicate<TAB>object<TAB>.``, each term an N-Triples term or a
    prefixed name (``ns:m.0abc``; ``@prefix`` lines are honoured, ``ns`` is ``namespace``).

    Kept/dropped rule, applied in this order (a dropped line yields nothing, it is not a
    reject):

    1. the predicate must lie under ``namespace``: rdf:/rdfs:/owl: predicates
       (``rdf:type``, ``rdfs:label`` …) and ``key:`` / other namespaces are dropped;
    2. predicates named in ``drop_predicates`` are dropped (default ``type.object.key``,
       ``type.object.permission``);
    3. predicates whose domain (first dotted segment, ``base`` in ``base.x.y``) is in
       ``drop_domains`` are dropped (e.g. ``("base", "user", "freebase")``);
    4. a language-tagged literal is kept only if its tag is in ``languages`` or is a
       subtag of one (``en`` keeps ``en`` and ``en-gb``); untagged and typed literals are
       always kept; ``languages=None`` keeps every language.
    """
    terms = _Terms(namespace)
    prefixes = dict(_DEFAULT_PREFIXES, ns=namespace)
    dropped_predicates = frozenset(_names(drop_predicates))
    dropped_domains = frozenset(_names(drop_domains))
    wanted = None if languages is None else tuple(lang.lower() for lang in _names(languages))
    wanted_sub = () if wanted is None else tuple(lang + "-" for lang in wanted)
    # predicate field -> relation name, or None when the filters drop it
    predicates: dict[str, str | None] = {}

    def expand(field: str) -> str:
        """The escaped IRI of an <IRI> or prefixed-name field."""
        if field[:1] == "<" and field[-1:] == ">":
            body = field[1:-1]
            if not _IRI_BODY.fullmatch(body):
                raise _BadLine(f"malformed IRI {field}")
            return body
        prefix, colon, local = field.partition(":")
        if colon and prefix in prefixes and local and _IRI_BODY.fullmatch(local):
            return prefixes[prefix] + local
        raise _BadLine(f"malformed term {field!r}: expected <IRI>, prefix:name, _:blank or \"literal\"")

    def relation_of(field: str) -> str | None:
        escaped = expand(field)
        if not _unescape(escaped).startswith(namespace):
            return None
        name = terms.predicate(escaped)
        if name in dropped_predicates or name.split(".", 1)[0] in dropped_domains:
            return None
        return name

    def unwanted(lang: str | None) -> bool:
        return wanted is not None and lang is not None and lang not in wanted and not lang.startswith(wanted_sub)

    def node(field: str) -> str:
        if field.startswith("_:"):
            if not _BLANK_LABEL.fullmatch(field[2:]):
                raise _BadLine(f"malformed blank node {field}")
            return field
        return terms.iri(expand(field))

    def parse(line: str) -> Triple | None:
        if not line or line[0] == "#":
            return None
        if line.startswith("@prefix"):
            add_prefix(line)
            return None
        fields = line.split("\t")
        if fields[-1].strip(" ") == ".":
            fields.pop()
        elif fields[-1].endswith("."):
            fields[-1] = fields[-1][:-1].rstrip(" ")
        else:
            if not line.strip():
                return None
            raise _BadLine("malformed Freebase line: missing the final '.'")
        if len(fields) < 3:
            raise _BadLine(f"malformed Freebase line: expected subject, predicate, object and '.', found {len(fields)} fields")
        p = fields[1]
        if p in predicates:
            relation = predicates[p]
        else:
            relation = predicates[p] = relation_of(p)
        if relation is None:
            return None
        # a raw tab inside a literal would have split it: put it back together
        o = fields[2] if len(fields) == 3 else "\t".join(fields[2:])
        obj: Term
        if o[:1] == '"':
            obj = literal(o)
            if unwanted(obj.lang):
                return None
        else:
            obj = node(o)
        return Triple(node(fields[0]), relation, obj)

    def literal(field: str) -> Literal:
        end = field.rfind('"')
        body = field[1:end]
        if end < 1 or not _STRING_BODY.fullmatch(body):
            raise _BadLine(f"malformed literal {field}")
        rest = field[end + 1:]
        if not rest:
            return terms.literal(body, None, None)
        if rest[0] == "@" and _LANG_ONLY.fullmatch(rest[1:]):
            return terms.literal(body, None, rest[1:])
        if rest.startswith("^^"):
            return terms.literal(body, expand(rest[2:]), None)
        raise _BadLine(f"malformed literal {field}")

    def add_prefix(line: str) -> None:
        body = line[len("@prefix"):].strip()
        name, colon, iri = body[:-1].partition(":") if body.endswith(".") else ("", "", "")
        name, iri = name.strip(), iri.strip()
        if not colon or not _PREFIX_NAME.fullmatch(name) or not _IRIREF_ONLY.fullmatch(iri):
            raise _BadLine("malformed @prefix line: expected @prefix name: <IRI> .")
        prefixes[name] = _unescape(iri[1:-1])
        predicates.clear()  # cached predicate fields may have meant another IRI

    return _parse_lines(source, parse)


# ---------------------------------------------------------------------------- plain text triples

def normalise_mid(node_id: str) -> str:
    """FB15k-237 writes Freebase ids as paths (``/m/027rn``); the RDF dump as ``m.027rn``."""
    if node_id.startswith(("/m/", "/g/")):
        return node_id[1] + "." + node_id[3:]
    return node_id


def read_metaqa(source: PathOrSource) -> Iterator[Item]:
    """Triples of MetaQA's ``kb.txt``: ``subject|relation|object``, all three taken verbatim
    (objects such as years and ratings are entity ids, as in the MetaQA questions)."""
    relation = _Relations()

    def parse(line: str) -> Triple | None:
        fields = line.split("|")
        if len(fields) != 3:
            if not line.strip():
                return None
            raise _BadLine(f"expected subject|relation|object, found {len(fields)} field(s)")
        return Triple(_check_id(fields[0]), relation(fields[1]), _check_id(fields[2]))

    return _parse_lines(source, parse)


def read_tsv(source: PathOrSource) -> Iterator[Item]:
    """Triples of ``subject<TAB>relation<TAB>object`` files (FB15k-237, PathQuestion KBs).

    Freebase ids written as paths become RDF-dump ids (``/m/027rn`` → ``m.027rn``, ``/g/…``
    → ``g.…``); relation names stay verbatim (``/film/film/genre``).
    """
    relation = _Relations()

    def parse(line: str) -> Triple | None:
        fields = line.split("\t")
        if len(fields) != 3:
            if not line.strip():
                return None
            raise _BadLine(f"expected subject<TAB>relation<TAB>object, found {len(fields)} field(s)")
        s, r, o = fields
        return Triple(_check_id(normalise_mid(s)), relation(r), _check_id(normalise_mid(o)))

    return _parse_lines(source, parse)


def read_entity_names(source: PathOrSource) -> Iterator[Item]:
    """``mid<TAB>name`` lines (FB15k-237 ``entity2text``) as English ``type.object.name`` triples."""

    def parse(line: str) -> Triple | None:
        fields = line.split("\t")
        if len(fields) != 2:
            if not line.strip():
                return None
            raise _BadLine(f"expected id<TAB>name, found {len(fields)} field(s)")
        mid, name = fields
        if not name.strip():
            raise _BadLine("empty name")
        return Triple(_check_id(normalise_mid(mid)), NAME_RELATION, Literal.make(name, lang="en"))

    return _parse_lines(source, parse)


# ---------------------------------------------------------------------------- RoG files

_ROG_COLUMNS = ("id", "question", "answer", "q_entity", "a_entity", "graph")


def _rog_rows(src: Source, columns: tuple[str, ...]) -> Iterator[tuple[int, str, dict] | Reject]:
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
    for item in _numbered_lines(src):
        if item.__class__ is Reject:
            yield item  # type: ignore[misc]
            continue
        n, line = item  # type: ignore[misc]
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            yield Reject(n, line, f"not a JSON object: {e}")
            continue
        if not isinstance(row, dict):
            yield Reject(n, line, "not a JSON object")
            continue
        yield n, line, row


def read_rog(source: PathOrSource) -> Iterator[Item]:
    """The ``graph`` triples ``[head, relation, tail]`` of every row of a RoG-style file
    (JSONL or parquet); every term is taken as an entity id. Rows share triples: the store
    deduplicates. A bad triple is rejected alone, with its row number."""
    relation = _Relations()
    with _Opened(source) as src:
        for item in _rog_rows(src, ("id", "graph")):
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
                        raise _BadLine("graph entry is not [head, relation, tail] strings")
                    yield Triple(_check_id(edge[0]), relation(edge[1]), _check_id(edge[2]))
                except (_BadLine, KGQAError) as e:
                    yield Reject(n, json.dumps(edge, ensure_ascii=False), f"row {row.get('id')!r}: {e}")


def _string_list(value: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]  # type: ignore[union-attr]


def read_rog_questions(path: str | os.PathLike[str]) -> list[Question]:
    """The questions of a RoG-style file (JSONL or parquet): id, question, answer,
    q_entity (topic entities), a_entity (answer entities)."""
    questions: list[Question] = []
    with Source(path) as src:
        for item in _rog_rows(src, _ROG_COLUMNS[:5]):
            if isinstance(item, Reject):
                raise ParseError(item.reason, source=str(path), line=item.line_no)
            n, _, row = item
            if not isinstance(row.get("question"), str):
                raise ParseError("row has no 'question' string", source=str(path), line=n)
            questions.append(
                Question(
                    id=str(row.get("id", n)),
                    question=row["question"],
                    answers=_string_list(row.get("answer")),
                    topic_entities=_string_list(row.get("q_entity")),
                    answer_entities=_string_list(row.get("a_entity")),
                )
            )
    return questions


# ---------------------------------------------------------------------------- MetaQA questions

#: MetaQA entity type -> the KB relation linking a movie to it (stored movie -> value)
METAQA_RELATIONS = {
    "actor": "starred_actors",
    "director": "directed_by",
    "writer": "written_by",
    "genre": "has_genre",
    "language": "in_language",
    "year": "release_year",
    "tag": "has_tags",
    "tags": "has_tags",
    "imdbrating": "has_imdb_rating",
    "imdbvotes": "has_imdb_votes",
}


def metaqa_relation_path(qtype: str) -> list[tuple[str, str]]:
    """(relation, direction) per hop of a MetaQA question type, walking from the topic entity.

    ``actor_to_movie_to_director`` → ``[("starred_actors", "in"), ("directed_by", "out")]``:
    every KB edge is stored movie → value, so a hop into a movie goes ``in`` and a hop out
    of one goes ``out``.
    """
    kinds = qtype.split("_to_")
    hops: list[tuple[str, str]] = []
    for here, there in zip(kinds, kinds[1:]):
        if here == "movie" and there in METAQA_RELATIONS:
            hops.append((METAQA_RELATIONS[there], "out"))
        elif there == "movie" and here in METAQA_RELATIONS:
            hops.append((METAQA_RELATIONS[here], "in"))
        else:
            raise InvalidInputError(
                f"unknown MetaQA question type {qtype!r}: expected kinds joined by '_to_' with every "
                f"hop to or from 'movie', kinds being movie, {', '.join(METAQA_RELATIONS)}"
            )
    if not hops:
        raise InvalidInputError(f"unknown MetaQA question type {qtype!r}: no hop")
    return hops


_HOP_DIR = re.compile(r"(\d+)-hop")


def read_metaqa_questions(qa_path: str | os.PathLike[str], qtype_path: str | os.PathLike[str] | None = None) -> list[Question]:
    """MetaQA questions: ``question<TAB>answer1|answer2…`` with the topic entity in [brackets].

    The question text is kept as given (brackets included). ``qtype_path`` gives one type
    per line in the same order; by default ``<stem>_qtype.txt`` beside ``qa_path`` is used
    when it exists. ``hops`` comes from the qtype, else from a ``N-hop`` directory name.
    """
    qa = Path(qa_path)
    if qtype_path is None:
        beside = qa.with_name(qa.name.split(".")[0] + "_qtype.txt")
        qtype_path = beside if beside.is_file() else None
    qtypes = _text_lines(Path(qtype_path)) if qtype_path is not None else None
    dir_hops = _HOP_DIR.fullmatch(qa.parent.name)
    questions: list[Question] = []
    lines = _text_lines(qa)
    if qtypes is not None and len(qtypes) != len(lines):
        raise ParseError(
            f"{len(lines)} questions but {len(qtypes)} question types in {str(qtype_path)!r}; the files must align",
            source=str(qa_path),
        )
    prefix = f"{qa.parent.name}/{qa.name.split('.')[0]}"
    for n, line in enumerate(lines, 1):
        text, tab, answer_field = line.partition("\t")
        start, end = text.find("["), text.find("]")
        if not tab or start < 0 or end <= start + 1:
            raise ParseError("expected question<TAB>answers with the topic entity in [brackets]", source=str(qa_path), line=n)
        answers = [a for a in answer_field.split("|") if a]
        qtype = qtypes[n - 1] if qtypes is not None else None
        if qtype is not None:
            try:
                hops: int | None = len(metaqa_relation_path(qtype))
            except InvalidInputError as e:
                raise ParseError(str(e), source=str(qtype_path), line=n) from e
        else:
            hops = int(dir_hops.group(1)) if dir_hops else None
        questions.append(
            Question(
                id=f"{prefix}:{n}",
                question=text,
                answers=answers,
                topic_entities=[text[start + 1:end]],
                answer_entities=list(answers),
                hops=hops,
                qtype=qtype,
            )
        )
    return questions


def _text_lines(path: Path) -> list[str]:
    """The lines of a small UTF-8 text file (gzip allowed), without line endings or a final empty line."""
    try:
        with Source(path) as src:
            data = src.binary().read().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ParseError(f"not UTF-8 text: {e}", source=str(path)) from e
    lines = data.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


# ---------------------------------------------------------------------------- PathQuestion

def read_pathquestion(path: str | os.PathLike[str]) -> list[Question]:
    """PathQuestion (PQ-2H / PQ-3H, PQL): ``question<TAB>answer(alt1/alt2/…/)<TAB>path``.

    The answer field names the answer reached by the annotated path, then in parentheses
    every gold answer, each followed by ``/``. The path is
    ``topic#r1#e1#r2#…#answer#<end>#answer``. ``answers`` (and ``answer_entities``) are the
    parenthesised gold answers; ``path`` the relations r1, r2, ….
    """
    questions: list[Question] = []
    stem = Path(path).name.split(".")[0]
    for n, line in enumerate(_text_lines(Path(path)), 1):
        fields = line.split("\t")
        if len(fields) != 3:
            raise ParseError(f"expected question<TAB>answers<TAB>path, found {len(fields)} field(s)", source=str(path), line=n)
        text, answer_field, path_field = fields
        head, paren, rest = answer_field.partition("(")
        if not paren or not rest.endswith(")"):
            raise ParseError(f"answer field {answer_field!r} is not answer(alt1/alt2/…/)", source=str(path), line=n)
        answers = list(dict.fromkeys(a for a in rest[:-1].split("/") if a)) or [head]
        steps = path_field.split("#")
        # topic, then (relation, entity) pairs, then "<end>", answer
        if len(steps) < 5 or len(steps) % 2 == 0 or steps[-2] != "<end>":
            raise ParseError(f"path {path_field!r} is not topic#r1#e1#…#answer#<end>#answer", source=str(path), line=n)
        relations = steps[1:-2:2]
        questions.append(
            Question(
                id=f"{stem}:{n}",
                question=text,
                answers=answers,
                topic_entities=[steps[0]],
                answer_entities=list(answers),
                hops=len(relations),
                path=relations,
            )
        )
    return questions


# ---------------------------------------------------------------------------- formats

@dataclass(frozen=True)
class Format:
    """A triple format: its reader and whether the reader takes a ``namespace``."""

    name: str
    read: Callable[..., Iterator[Item]]
    namespaced: bool
    description: str


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("ntriples", read_ntriples, True, "W3C N-Triples (.nt)"),
        Format("freebase", read_freebase, True, "the Freebase RDF dump (freebase-rdf-*.gz), filtered"),
        Format("metaqa", read_metaqa, False, "subject|relation|object (MetaQA kb.txt)"),
        Format("tsv", read_tsv, False, "subject<TAB>relation<TAB>object (FB15k-237, PathQuestion KBs)"),
        Format("entity-names", read_entity_names, False, "id<TAB>name (FB15k-237 entity2text)"),
        Format("rog", read_rog, False, "RoG question files with a graph column (.jsonl, .parquet)"),
    )
}


def format_names() -> str:
    return ", ".join(f"{f.name} ({f.description})" for f in FORMATS.values())


def get_format(name: str) -> Format:
    if name not in FORMATS:
        raise InvalidInputError(f"unknown format {name!r}: use one of {format_names()}")
    return FORMATS[name]


def detect_format(path: str | os.PathLike[str]) -> str:
    """The format of a file, from its name, else from its first non-blank line."""
    p = Path(path)
    name = p.name[:-3] if p.name.endswith(".gz") else p.name
    lowered = name.lower()
    if lowered.startswith("freebase-rdf") or lowered.endswith(".ttl"):
        return "freebase"
    if lowered.endswith(".nt"):
        return "ntriples"
    if lowered.endswith((".jsonl", ".parquet")):
        return "rog"
    if lowered.startswith("entity2text"):
        return "entity-names"
    with Source(p) as src:
        head = src.binary().read(4)
        if head == b"PAR1":
            return "rog"
        src.binary().seek(0)
        first = _first_line(src)
    if first is None:
        raise InvalidInputError(f"cannot tell the format of {str(p)!r}: it is empty; name one of {format_names()}")
    if first.startswith(("@prefix", "ns:")) or (first.startswith("<") and first.count("\t") >= 3):
        return "freebase"
    if first.startswith(("<", "_:")):
        return "ntriples"
    if first.startswith("{"):
        return "rog"
    tabs = first.count("\t")
    if tabs == 2:
        return "tsv"
    if tabs == 1:
        return "entity-names"
    if tabs == 0 and first.count("|") == 2:
        return "metaqa"
    raise InvalidInputError(f"cannot tell the format of {str(p)!r} from its first line {first[:80]!r}; name one of {format_names()}")


def _first_line(src: Source) -> str | None:
    for n, raw in enumerate(src, 1):
        line = raw.decode("utf-8", "replace").strip("\r\n")
        if n == 1:
            line = line.lstrip("\ufeff")
        if line.strip() and not line.startswith("#"):
            return line
        if n >= 1000:
            break
    return None


def read_triples(source: PathOrSource, format: str | None = None, **options: object) -> Iterator[Item]:
    """Triples and rejects of one file in ``format`` (detected when None)."""
    if format is None:
        format = detect_format(source.path if isinstance(source, Source) else source)
    return get_format(format).read(source, **options)
