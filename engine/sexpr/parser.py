"""Tokenizer and recursive-descent parser for the S-expression language of ``tree.py``.

Every error is an :class:`SExprSyntaxError` carrying the 0-based character ``position`` where
the input went wrong, an expression past one of the size bounds included (:func:`check_size`). Relation and
class names pass :func:`engine.identifiers.validate_relation`, literals
:meth:`engine.graph.Literal.make`, so a parsed tree is safe to compile.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from engine.errors import InvalidIdentifierError, InvalidInputError, ParseError, clipped
from engine.graph import XSD, Literal
from engine.identifiers import validate_relation
from engine.sexpr.tree import (
    COMPARISONS,
    DATATYPES,
    FREEBASE_ID,
    NOW,
    And,
    Chain,
    Class,
    Compare,
    Count,
    Entity,
    Expr,
    Extreme,
    Join,
    Path,
    Rel,
    Relation,
    Reverse,
    TimeConstraint,
    Top,
    Value,
    literal_kind,
    triple_patterns,
)

OPERATORS = ("JOIN", "AND", "R", "COUNT", "ARGMAX", "ARGMIN", "TC") + COMPARISONS
#: The parser and the compilers recurse once per parenthesis, and Python's recursion limit stops
#: them at about 1,000 levels; the logical forms of GrailQA and WebQSP nest at most 6 deep.
MAX_DEPTH = 64
#: Each AND adds a conjunct on one variable, and stores plan many conjuncts on one variable in
#: time that grows steeply (48 class constraints took Virtuoso 2.9 s, 64 took 7.8 s, 128 failed).
#: Every other form takes a fixed number of arguments, so this and MAX_DEPTH bound the tree.
MAX_ANDS = 16
#: A SPARQL store gets an ARGMAX's argument twice (to find the best value, then the members that
#: have it), so each one nested doubles the query: four nested ran Virtuoso out of its memory
#: pool, 14 compiled to 100 MB. GrailQA's and WebQSP's forms hold at most one.
MAX_EXTREMES = 2
#: Triple patterns in the expression's query (:func:`engine.sexpr.tree.triple_patterns`): Virtuoso
#: refuses a query of about 80 joined patterns and its server dies at about 85.
MAX_PATTERNS = 64
_YEAR = re.compile(r"-?\d{1,4}")
_TOKEN = re.compile(
    r"""\s*(?:
        (?P<open>\()|(?P<close>\))
      | (?P<quoted>"(?:[^"\\]|\\.)*"(?:@[A-Za-z][A-Za-z0-9-]*|\^\^[^\s()]+)?)
      | (?P<bracket>\[(?:[^\]\\]|\\.)*\])
      | (?P<atom>[^\s()"\[\]]+)
    )""",
    re.VERBOSE | re.DOTALL,
)


class SExprSyntaxError(ParseError):
    """A malformed S-expression; ``position`` is the 0-based offset of the fault."""

    def __init__(self, position: int, message: str, text: str = "") -> None:
        shown = f"{message} at position {position}"
        if text:
            shown += f": {text[max(0, position - 30):position]}⟨here⟩{text[position:position + 30]}"
        super().__init__(shown)
        self.position = position
        self.message = message


@dataclass(frozen=True)
class Token:
    kind: str  # open, close, quoted, bracket, atom
    text: str
    position: int


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    while True:
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            rest = len(text) - len(text[pos:].lstrip())
            if pos + rest >= len(text) or not text[pos:].strip():
                return tokens
            raise SExprSyntaxError(pos + rest, "unexpected character " + repr(text[pos + rest]), text)
        kind = match.lastgroup or "atom"
        tokens.append(Token(kind, match.group(kind), match.start(kind)))
        pos = match.end()


def parse(text: str) -> Top:
    """The tree of one S-expression; raises :class:`SExprSyntaxError`."""
    if not isinstance(text, str):
        raise InvalidInputError(f"an S-expression must be a string, got {type(text).__name__}")
    parser = _Parser(text, tokenize(text))
    if not parser.tokens:
        raise SExprSyntaxError(0, "empty S-expression", text)
    check_size(text, parser.tokens)
    tree = parser.top()
    if parser.i < len(parser.tokens):
        raise SExprSyntaxError(parser.tokens[parser.i].position, "unexpected text after the expression", text)
    patterns = triple_patterns(tree)
    if patterns > MAX_PATTERNS:
        raise SExprSyntaxError(
            0, f"the expression's query would join {patterns} triple patterns, and stores take at most {MAX_PATTERNS} "
               "in one query (an ARGMAX counts its argument twice); write it with fewer relations", text,
        )
    return tree


def check_size(text: str, tokens: list[Token]) -> None:
    """Raise :class:`SExprSyntaxError` at the first token past a bound, unless the expression
    ``text`` (read as ``tokens``) nests parentheses at most :data:`MAX_DEPTH` deep and holds at
    most :data:`MAX_ANDS` ANDs and :data:`MAX_EXTREMES` ARGMAX or ARGMIN forms. Read before the
    recursive parser; :func:`parse` then bounds the query's triple patterns (:data:`MAX_PATTERNS`).
    Within these bounds every store compiles and answers an expression promptly."""
    depth = ands = extremes = 0
    for i, token in enumerate(tokens):
        problem = None
        if token.kind == "open":
            depth += 1
            if depth > MAX_DEPTH:
                problem = f"the expression nests more than {MAX_DEPTH} levels deep; write it with at most {MAX_DEPTH}"
        elif token.kind == "close":
            depth = max(depth - 1, 0)  # a stray ')' is an error of its own, not a credit
        elif i > 0 and tokens[i - 1].kind == "open":  # an operator
            ands += token.text == "AND"
            extremes += token.text in ("ARGMAX", "ARGMIN")
            if ands > MAX_ANDS:
                problem = f"the expression holds more than {MAX_ANDS} ANDs; write it with at most {MAX_ANDS}"
            elif extremes > MAX_EXTREMES:
                problem = f"the expression holds more than {MAX_EXTREMES} ARGMAX or ARGMIN forms; write it with at most {MAX_EXTREMES}"
        if problem is not None:
            raise SExprSyntaxError(token.position, problem, text)


def parse_literal(text: str) -> Literal:
    """A literal written as in an S-expression (``1990^^http://www.w3.org/2001/XMLSchema#gYear``,
    ``'"Paris"@en'``), e.g. a question's literal anchor given on the command line."""
    try:
        node: object = parse(text)
        why = "" if isinstance(node, Value) else "it reads as a name or an expression, not a value"
    except SExprSyntaxError as e:
        why = str(e)
    if why:
        raise InvalidInputError(
            f"{clipped(repr(text), 200)} is not a literal ({why}): write e.g. 1990^^http://www.w3.org/2001/XMLSchema#gYear "
            "or '\"Paris\"@en', and a text with spaces in double quotes: '\"hello world\"'"
        )
    return node.literal  # type: ignore[attr-defined]


class _Parser:
    def __init__(self, text: str, tokens: list[Token]) -> None:
        self.text = text
        self.tokens = tokens
        self.i = 0

    # ------------------------------------------------------------------ tokens
    def error(self, position: int, message: str) -> SExprSyntaxError:
        return SExprSyntaxError(position, message, self.text)

    def peek(self) -> Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def next(self, what: str) -> Token:
        token = self.peek()
        if token is None:
            raise self.error(len(self.text), f"unexpected end of input: expected {what} (unbalanced parentheses?)")
        self.i += 1
        return token

    def close(self, op: Token, arity: int) -> None:
        token = self.next("')'")
        if token.kind != "close":
            raise self.error(token.position, f"{op.text} takes {arity} argument{'s' if arity > 1 else ''}; found more")

    def operator(self) -> Token | None:
        """After '(' : the operator token, or None (and no move) when the next token is no '('."""
        token = self.peek()
        if token is None or token.kind != "open":
            return None
        self.i += 1
        op = self.next("an operator")
        if op.kind != "atom" or op.text not in OPERATORS:
            raise self.error(op.position, f"unknown operator {op.text!r}: use one of {', '.join(OPERATORS)}")
        return op

    def expect_more(self, op: Token, arity: int) -> None:
        token = self.peek()
        if token is not None and token.kind == "close":
            raise self.error(token.position, f"{op.text} takes {arity} argument{'s' if arity > 1 else ''}; found fewer")

    # ------------------------------------------------------------------ grammar
    def top(self) -> Top:
        start = self.i
        op = self.operator()
        if op is not None and op.text == "COUNT":
            self.expect_more(op, 1)
            arg = self.expr()
            self.close(op, 1)
            return Count(arg)
        self.i = start
        return self.expr()

    def expr(self) -> Expr:
        op = self.operator()
        if op is None:
            return self.atom_expr()
        self.expect_more(op, 2)
        name = op.text
        if name == "JOIN":
            rel = self.rel()
            self.expect_more(op, 2)
            node: Expr = Join(rel, self.expr())
            self.close(op, 2)
        elif name == "AND":
            left = self.expr()
            self.expect_more(op, 2)
            node = And(left, self.expr())
            self.close(op, 2)
        elif name in ("ARGMAX", "ARGMIN"):
            arg = self.expr()
            self.expect_more(op, 2)
            node = Extreme(name, arg, self.path())
            self.close(op, 2)
        elif name in COMPARISONS:
            relation = self.relation()
            self.expect_more(op, 2)
            token = self.peek()
            value = self.atom_expr()
            if not isinstance(value, Value) or literal_kind(value.literal) is None:
                raise self.error(token.position, f"{name} compares with a number or a date literal, e.g. 1990^^{XSD}gYear")  # type: ignore[union-attr]
            node = Compare(name, relation, value)
            self.close(op, 2)
        elif name == "TC":
            arg = self.expr()
            self.expect_more(op, 3)
            relation = self.relation()
            self.expect_more(op, 3)
            year = self.next("a year or NOW")
            if year.kind != "atom" or not (year.text == NOW or _YEAR.fullmatch(year.text)):
                raise self.error(year.position, f"TC takes a year (e.g. 2009) or NOW, not {year.text!r}")
            node = TimeConstraint(arg, relation, year.text)
            self.close(op, 3)
        elif name == "COUNT":
            raise self.error(op.position, "COUNT may only be the outermost operator")
        else:  # R
            raise self.error(op.position, "(R relation) may only stand where a relation is expected")
        return node

    def atom_expr(self) -> Expr:
        token = self.next("an entity, a literal, a class or '('")
        if token.kind == "close":
            raise self.error(token.position, "unexpected ')'")
        if token.kind == "bracket":
            node_id = re.sub(r"\\(.)", r"\1", token.text[1:-1])
            if not node_id or any(ord(c) < 32 for c in node_id):
                raise self.error(token.position, "an id in brackets must be non-empty, without control characters")
            return Entity(node_id)
        if token.kind == "quoted":
            return self.literal(token)
        if _is_entity(token.text):
            return Entity(token.text)
        if "^^" in token.text:
            return self.literal(token)
        return Class(self.name(token, "class"))

    def literal(self, token: Token) -> Value:
        text = token.text
        lang = datatype = None
        if text.startswith('"'):
            end = _closing_quote(text)
            body, suffix = re.sub(r"\\(.)", r"\1", text[1:end]), text[end + 1:]
            if suffix.startswith("@"):
                lang = suffix[1:]
            elif suffix.startswith("^^"):
                datatype = suffix[2:]
        else:
            body, _, datatype = text.partition("^^")
        if datatype is not None:
            local = datatype[len(XSD):] if datatype.startswith(XSD) else None
            if local not in DATATYPES:
                raise self.error(token.position, f"unknown datatype {datatype!r}: use {XSD}<one of {', '.join(DATATYPES)}>")
        try:
            return Value(Literal.make(body, datatype, lang), text)
        except InvalidInputError as e:
            raise self.error(token.position, f"bad literal {text!r}: {e}") from e

    def name(self, token: Token, what: str) -> str:
        if token.kind != "atom":
            raise self.error(token.position, f"expected a {what} name, found {clipped(repr(token.text), 200)}")
        try:
            return validate_relation(token.text)
        except InvalidIdentifierError as e:
            raise self.error(token.position, f"invalid {what} name {clipped(repr(token.text), 200)}: names may contain "
                             "only ASCII letters, digits, '_', '.', '/' and '-' (at most 256 characters)") from e

    def relation(self) -> Relation:
        token = self.next("a relation")
        if token.kind == "open":
            raise self.error(token.position, "expected a relation name here, not '(' (a reverse (R …) is not allowed)")
        if token.kind == "atom" and (_is_entity(token.text) or "^^" in token.text):
            raise self.error(token.position, f"expected a relation, found {token.text!r}")
        return Relation(self.name(token, "relation"))

    def rel(self) -> Rel:
        token = self.peek()
        if token is not None and token.kind == "open":
            start = self.i
            self.i += 1
            op = self.next("R")
            if op.text != "R":
                self.i = start
                raise self.error(op.position, f"expected a relation or (R relation), found ({op.text} …)")
            self.expect_more(op, 1)
            node = Reverse(self.relation())
            self.close(op, 1)
            return node
        return self.relation()

    def path(self) -> Path:
        token = self.peek()
        if token is not None and token.kind == "open" and self.i + 1 < len(self.tokens) and self.tokens[self.i + 1].text == "JOIN":
            self.i += 1
            op = self.next("JOIN")
            self.expect_more(op, 2)
            first = self.rel()
            self.expect_more(op, 2)
            node = Chain(first, self.path())
            self.close(op, 2)
            return node
        return self.rel()


def _is_entity(text: str) -> bool:
    return bool(FREEBASE_ID.fullmatch(text))


def _closing_quote(text: str) -> int:
    i = 1
    while text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    return i
