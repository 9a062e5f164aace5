"""N-Triples lines that an RDF store can take verbatim.

Most lines of a real dump (Freebase, MetaQA, FB15k-237 written as N-Triples) are already, byte
for byte, the text the engine itself writes for the triple the reader parses out of them: IRIs
under the store's namespace percent-encoded as :meth:`sparql.terms.Terms.iri_of` encodes them,
plain or language-tagged strings, and typed values already in their canonical lexical form. Such
a line can go to the store's bulk loader as it is, skipping the Python objects of the full parse
(:func:`loaders.ntriples.read_ntriples`). :class:`CanonicalNTriples` recognises them; every other
line takes the full parse, so what is stored never depends on which way a line went.
"""
from __future__ import annotations

import re
from urllib.parse import unquote

from engine.errors import InvalidIdentifierError
from engine.graph import XSD
from engine.identifiers import MAX_ID_LENGTH, validate_relation

# A local name as ``quote(id, safe="")`` writes it: unreserved characters, and %XX (upper-case
# hex) only for the printable ASCII characters that quote() escapes. Left to the full parse:
# non-ASCII ids (their UTF-8 would need checking), ':' (an id spelled like an absolute IRI is
# stored as that IRI, not under the namespace) and anything else. Written unrolled (a run of
# plain characters, then escape + run, repeated): what Python's re matches fastest.
_LOCAL = r"(?=[^>])[A-Za-z0-9_.~\-]*(?:%(?:2[0-9A-C]|2F|3[B-F]|40|5[B-E]|60|7[B-D])[A-Za-z0-9_.~\-]*)*"
# A relation name: the relation pattern's characters, with '/' as quote() writes it.
_RELATION = r"((?=[^>])[A-Za-z0-9_.\-]*(?:%2F[A-Za-z0-9_.\-]*)*)"
# A string without escapes or control characters (its text is its value).
_STRING = r'"[^"\\\x00-\x1f\x7f]*"'
_LANG = r"@[a-z]{1,8}(?:-[a-z0-9]{1,8})*"  # lower case: the data model lower-cases tags
# Typed values whose canonical lexical form (engine.graph.Literal.make) is their text as written:
# dates without a time zone, whole seconds, booleans. Numbers are left to the full parse
# (canonical forms depend on the value, and stores write integers differently).
_TYPED = (
    rf'"-?[0-9]{{4,}}"\^\^<{XSD}gYear>'
    rf'|"-?[0-9]{{4,}}-[0-9]{{2}}"\^\^<{XSD}gYearMonth>'
    rf'|"-?[0-9]{{4,}}-[0-9]{{2}}-[0-9]{{2}}"\^\^<{XSD}date>'
    rf'|"-?[0-9]{{4,}}-[0-9]{{2}}-[0-9]{{2}}T[0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}}"\^\^<{XSD}dateTime>'
    rf'|"(?:true|false)"\^\^<{XSD}boolean>'
)


class CanonicalNTriples:
    """``accepts(line)``: whether an N-Triples line (without its line ending) is in the exact
    form the engine writes for ``namespace``, so that a store may load its text unchanged;
    lines longer than ``max_chars`` never are (the store's term limits need the full parse), nor
    lines longer than :data:`engine.identifiers.MAX_ID_LENGTH` (the bound on every id)."""

    def __init__(self, namespace: str, max_chars: int | None = None) -> None:
        ns = re.escape(namespace)
        self.namespace = namespace
        # longer lines are left to the full parse; a shorter line holds no id that is too long
        self.max_chars = MAX_ID_LENGTH if max_chars is None else min(max_chars, MAX_ID_LENGTH)
        self._line = re.compile(
            rf"<{ns}{_LOCAL}> <{ns}{_RELATION}> (?:<{ns}{_LOCAL}>|{_STRING}(?:{_LANG})?|{_TYPED}) \."
        )
        self._relations: dict[str, bool] = {}  # encoded relation -> valid relation name?

    def accepts(self, line: str) -> bool:
        if len(line) > self.max_chars:
            return False
        m = self._line.fullmatch(line)
        if m is None:
            return False
        encoded = m.group(1)
        valid = self._relations.get(encoded)
        if valid is None:
            try:
                validate_relation(unquote(encoded))
                valid = True
            except InvalidIdentifierError:
                valid = False
            self._relations[encoded] = valid
        return valid
