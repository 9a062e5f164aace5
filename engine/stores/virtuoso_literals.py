"""Virtuoso's answers turned back into the literals that were loaded.

Virtuoso prints doubles and floats with six digits (the compiled queries add a companion
column with 17, see ``sparql/virtuoso.py``) and writes negative years with fewer than four
digits (``-044``).
"""
from __future__ import annotations

import re

from engine.graph import XSD, Literal

_FLOATS = {XSD + "float", XSD + "double"}
_DATES = {XSD + "date", XSD + "dateTime", XSD + "gYear", XSD + "gYearMonth"}
_YEAR = re.compile(r"^(-?)(\d{1,3})(?=\D|$)")
# infinities and NaN stored as numbers (by another loader), as bif:sprintf writes them
_NUMERIC_SPECIALS = {"inf": "INF", "-inf": "-INF", "nan": "NaN", "-nan": "NaN"}


def virtuoso_literal(value: str, datatype: str | None, lang: str | None, exact: str | None) -> Literal:
    """A literal as Virtuoso returns it, turned back into the one that was loaded.

    Virtuoso prints doubles and floats with six digits (``exact`` holds 17) and writes
    negative years with fewer than four digits (``-044``). What :class:`Literal`
    canonicalises anyway needs nothing here: booleans as 0/1, dateTime fractions padded to
    milliseconds (``.250``), xsd:float in single precision.
    """
    if datatype in _FLOATS and exact is not None:
        value = _NUMERIC_SPECIALS.get(exact, exact)
    elif datatype in _DATES:
        value = _YEAR.sub(lambda m: m.group(1) + m.group(2).zfill(4), value, count=1)
    return Literal(value, datatype, lang)
