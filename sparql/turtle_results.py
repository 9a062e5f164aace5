"""Reading a SELECT's answer written as an RDF graph in Turtle (the W3C result-set vocabulary,
``http://www.w3.org/2005/sparql-results#``), as Virtuoso writes it for ``Accept: text/turtle``.

Why: Virtuoso's JSON writer is its slowest (docs/design/result-formats.md). Its Turtle
keeps every term's kind, datatype and language, except that numbers are written bare, so an
xsd:double without an exponent reads as a decimal: the compiled queries' companion columns
carry each number's datatype (``sparql/virtuoso.py``).

Virtuoso writes one binding per line::

    _:_ res:resultVariable "a" , "b" .
    _:_ res:solution [
          res:binding [ res:variable "a" ; res:value <http://x> ] ;
          res:binding [ res:variable "b" ; res:value "v"@en ] ] .
    _:_ res:solution [ ] .

and escapes line breaks inside strings, so :func:`read_turtle_results` reads those lines with
string operations. Where every row binds the same variables in the same order (most answers),
each variable's lines sit at a fixed stride, and a column is checked and cut out of them as a
whole (``_read_regular``, faster than reading line by line on large answers). Any other
layout (another server or version) is read by pyoxigraph's Turtle parser instead, with the
same result.
"""
from __future__ import annotations

from collections.abc import Mapping
from operator import itemgetter

import pyoxigraph as ox

from engine.errors import StoreError

RES = "http://www.w3.org/2005/sparql-results#"
_BINDING = '      res:binding [ res:variable "'
_VALUE = ' ; res:value '
_ROW = "_:_ res:solution ["
_EMPTY_ROW = "_:_ res:solution [ ] ."
_VARIABLES = "_:_ res:resultVariable "
_MORE, _LAST = " ] ;", " ] ] ."  # the end of a binding line, and of a row's last one
#: Answers of this many characters or more are read by columns where they can be: below
#: ≈ 2 KB reading line by line is as fast or faster (measured on the overhead workloads' answers).
COLUMNS_FROM = 2048
_SKIPPED = ("", "_:_ a res:ResultSet .")

#: A result: its variable names, per name the column of its values as Turtle tokens (None when
#: unbound), and the prefixes the tokens may use.
TurtleResult = tuple[list[str], list[list[str | None]], dict[str, str]]


class _OtherLayout(Exception):
    """The text is not laid out as Virtuoso writes it."""


def read_turtle_results(data: str) -> TurtleResult:
    """A Turtle result set's variables, its columns of value tokens, and its prefixes."""
    try:
        return (len(data) >= COLUMNS_FROM and _read_regular(data)) or _read_lines(data)
    except _OtherLayout:
        return _read_graph(data)


def _read_regular(data: str) -> TurtleResult | None:
    """The result, when every row binds the same variables in the same order with nothing
    between the rows; else None. Row ``i`` is then lines ``i*(k+1)`` to ``i*(k+1)+k`` of the
    rows' text: its start, then one line per bound variable."""
    first = data.find("\n" + _ROW + "\n")
    if first < 0:
        return None
    names, head_rows, prefixes = _read_lines(data[:first + 1])
    if names and head_rows[0]:  # a row binding nothing came first
        return None
    lines = data[first + 1:].rstrip("\n").split("\n")
    if data.find("\n@prefix ", first) >= 0:  # a namespace first met between two rows
        declared = [line for line in lines if line.startswith("@prefix ")]
        prefixes.update(_read_lines("\n".join(declared))[2])
        lines = [line for line in lines if not line.startswith("@prefix ")]
    bound: list[str] = []  # the first row's variables, in order
    for line in lines[1:]:
        if not line.startswith(_BINDING):
            return None
        bound.append(line[len(_BINDING):line.find('"', len(_BINDING))])
        if line.endswith(_LAST):
            break
    k = len(bound)
    rows, rest = divmod(len(lines), k + 1)
    if not k or rest or lines[::k + 1].count(_ROW) != rows or len(set(bound)) != k or not set(bound) <= set(names):
        return None
    columns: dict[str, list[str | None]] = {}
    for j, name in enumerate(bound):
        column = lines[1 + j::k + 1]
        prefix, suffix = _BINDING + name + '"' + _VALUE, _LAST if j == k - 1 else _MORE
        # Values hold no line break, so the column's n lines are all "prefix value suffix"
        # exactly when its text starts and ends so and each of its n-1 line breaks sits
        # between a suffix and a prefix.
        text = "\n".join(column)
        if not (text.startswith(prefix) and text.endswith(suffix) and text.count(suffix + "\n" + prefix) == rows - 1):
            return None
        columns[name] = list(map(itemgetter(slice(len(prefix), -len(suffix))), column))
    return names, [columns[name] if name in columns else [None] * rows for name in names], prefixes


def _read_lines(data: str) -> TurtleResult:
    names: list[str] = []
    index: dict[str, int] = {}
    prefixes: dict[str, str] = {}
    rows: list[list[str | None]] = []
    row: list[str | None] | None = None
    start = len(_BINDING)
    for line in data.split("\n"):
        if line.startswith(_BINDING):
            quote = line.find('"', start)
            slot = index.get(line[start:quote])
            if row is None or slot is None or not line.startswith(_VALUE, quote + 1):
                raise _OtherLayout
            if line.endswith(_MORE):
                row[slot] = line[quote + 1 + len(_VALUE):-len(_MORE)]
            elif line.endswith(_LAST):
                row[slot] = line[quote + 1 + len(_VALUE):-len(_LAST)]
                rows.append(row)
                row = None
            else:
                raise _OtherLayout
        elif line == _ROW and row is None:
            row = [None] * len(names)
        elif line == _EMPTY_ROW and row is None:
            rows.append([None] * len(names))
        elif line.startswith("@prefix "):
            name, _, iri = line[len("@prefix "):].partition(":")
            iri = iri.strip()
            if not (iri.startswith("<") and iri.endswith("> .")):
                raise _OtherLayout
            prefixes[name] = iri[1:-3]
        elif line.startswith(_VARIABLES) and not names and line.endswith(" ."):
            names = [v.strip()[1:-1] for v in line[len(_VARIABLES):-2].split(",")]
            index = {name: i for i, name in enumerate(names)}
        elif line not in _SKIPPED:
            raise _OtherLayout
    if row is not None or prefixes.get("res", RES) != RES:
        raise _OtherLayout
    return names, _columns(rows, len(names)), prefixes


def _read_graph(data: str) -> TurtleResult:
    """Any Turtle result set, through a full parser; terms come back as N-Triples tokens."""
    try:
        triples = list(ox.parse(data.encode("utf-8"), format=ox.RdfFormat.TURTLE))
    except SyntaxError as e:
        raise StoreError(f"cannot read a Turtle result set: {e}") from e
    variables, solutions, bindings = [], [], {}  # bindings: node -> [variable, value]
    for t in triples:
        p = t.predicate.value
        if p == RES + "resultVariable":
            variables.append(t.object.value)
        elif p == RES + "solution":
            solutions.append(t.object)
        elif p in (RES + "variable", RES + "value"):
            bindings.setdefault(t.subject, [None, None])[p == RES + "value"] = t.object
    of_solution: dict = {}
    for t in triples:
        if t.predicate.value == RES + "binding":
            of_solution.setdefault(t.subject, []).append(t.object)
    index = {name: i for i, name in enumerate(variables)}
    rows = []
    for solution in solutions:
        row: list[str | None] = [None] * len(variables)
        for node in of_solution.get(solution, ()):
            variable, value = bindings.get(node, (None, None))
            if variable is None or value is None or variable.value not in index:
                raise StoreError("a Turtle result set has a binding without a known variable or a value")
            row[index[variable.value]] = str(value)
        rows.append(row)
    return variables, _columns(rows, len(variables)), {}


def _columns(rows: list[list[str | None]], width: int) -> list[list[str | None]]:
    """Rows turned into ``width`` columns (empty ones when there are no rows)."""
    return [list(column) for column in zip(*rows)] if rows else [[] for _ in range(width)]


def expand_prefixed(token: str, prefixes: Mapping[str, str]) -> str:
    """``token`` with a prefixed datatype or a prefixed name written as a full IRI."""
    if token.startswith('"'):
        end = token.rfind('"')
        suffix = token[end + 1:]
        if suffix.startswith("^^") and not suffix.startswith("^^<"):
            return token[:end + 1] + "^^<" + _resolve(suffix[2:], prefixes) + ">"
        return token
    if token[:1] not in ("<", "_") and ":" in token and not token[:1].isdigit() and token[:1] not in "+-.":
        return "<" + _resolve(token, prefixes) + ">"
    return token


def _resolve(name: str, prefixes: Mapping[str, str]) -> str:
    prefix, _, local = name.partition(":")
    if prefix not in prefixes:
        raise StoreError(f"a Turtle result uses the undeclared prefix {prefix!r}")
    return prefixes[prefix] + local

