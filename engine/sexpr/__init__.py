"""S-expressions (GrailQA's logical forms): a typed tree, its parser and printer, a Python
evaluator, and the conversion of WebQSP parses. The SPARQL and Cypher compilers live in
``sparql/sexpr.py`` and ``cypher/sexpr.py``."""
from engine.sexpr.parser import SExprSyntaxError, parse, parse_literal
from engine.sexpr.tree import to_text

__all__ = ["SExprSyntaxError", "parse", "parse_literal", "to_text"]
