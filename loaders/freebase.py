"""The Freebase RDF dump reader (``freebase`` format): tab-separated N-Triples terms with
prefixed names, filtered the customary way."""
from __future__ import annotations

import re
from collections.abc import Iterator

from engine.graph import FREEBASE_NS, XSD, Literal, Term, Triple
from engine.limits import TermCheck
from loaders.ntriples import (
    BLANK_LABEL,
    IRI_BODY,
    IRIREF_ONLY,
    LANG_ONLY,
    STRING_BODY,
    NTriplesTerms,
    unescape,
)
from loaders.source import BadLine, Item, PathOrSource, parse_lines

# ---------------------------------------------------------------------------- Freebase

_PREFIX_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]*|")  # Turtle PN_PREFIX, ASCII only; may be empty
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
    check: TermCheck | None = None,
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
    terms = NTriplesTerms(namespace)
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
            if not IRI_BODY.fullmatch(body):
                raise BadLine(f"malformed IRI {field}")
            return body
        prefix, colon, local = field.partition(":")
        if colon and prefix in prefixes and local and IRI_BODY.fullmatch(local):
            return prefixes[prefix] + local
        raise BadLine(f"malformed term {field!r}: expected <IRI>, prefix:name, _:blank or \"literal\"")

    def relation_of(field: str) -> str | None:
        escaped = expand(field)
        if not unescape(escaped).startswith(namespace):
            return None
        name = terms.predicate(escaped)
        if name in dropped_predicates or name.split(".", 1)[0] in dropped_domains:
            return None
        return name

    def unwanted(lang: str | None) -> bool:
        return wanted is not None and lang is not None and lang not in wanted and not lang.startswith(wanted_sub)

    def node(field: str) -> str:
        if field.startswith("_:"):
            if not BLANK_LABEL.fullmatch(field[2:]):
                raise BadLine(f"malformed blank node {field}")
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
            raise BadLine("malformed Freebase line: missing the final '.'")
        if len(fields) < 3:
            raise BadLine(f"malformed Freebase line: expected subject, predicate, object and '.', found {len(fields)} fields")
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
        if end < 1 or not STRING_BODY.fullmatch(body):
            raise BadLine(f"malformed literal {field}")
        rest = field[end + 1:]
        if not rest:
            return terms.literal(body, None, None)
        if rest[0] == "@" and LANG_ONLY.fullmatch(rest[1:]):
            return terms.literal(body, None, rest[1:])
        if rest.startswith("^^"):
            return terms.literal(body, expand(rest[2:]), None)
        raise BadLine(f"malformed literal {field}")

    def add_prefix(line: str) -> None:
        body = line[len("@prefix"):].strip()
        name, colon, iri = body[:-1].partition(":") if body.endswith(".") else ("", "", "")
        name, iri = name.strip(), iri.strip()
        if not colon or not _PREFIX_NAME.fullmatch(name) or not IRIREF_ONLY.fullmatch(iri):
            raise BadLine("malformed @prefix line: expected @prefix name: <IRI> .")
        prefixes[name] = unescape(iri[1:-1])
        predicates.clear()  # cached predicate fields may have meant another IRI

    return parse_lines(source, parse, check)
