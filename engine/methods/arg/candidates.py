"""Kept relation paths → candidate S-expressions, and references with names for ids.

A path leaves an anchor (an entity, or a literal) through one or two hops, each a relation
with the direction it was met in (``out``: anchor side is the subject). Its logical form
joins hop by hop — ``out`` gives ``(JOIN (R r) X)``, ``in`` gives ``(JOIN r X)`` — and,
where the schema (GrailQA's ``fb_roles``: domain, relation, range) knows the class the last
hop lands on, a variant with ``(AND class …)``. A literal anchor reached ``in`` gives
``(JOIN r literal)`` and the comparisons ``(lt r literal)`` … as variants.
"""
from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from pathlib import Path

from engine.graph import Literal
from engine.sexpr.tree import (
    COMPARISONS,
    And,
    Class,
    Compare,
    Entity,
    Expr,
    Join,
    Relation,
    Reverse,
    Top,
    Value,
    literal_kind,
    to_text,
    value,
)

Hop = tuple[str, str]  # (relation, direction)


@dataclass
class Schema:
    """Domain and range class of each relation (empty for graphs without a schema)."""

    domain: dict[str, str] = field(default_factory=dict)
    range: dict[str, str] = field(default_factory=dict)

    def lands_on(self, hop: Hop) -> str | None:
        """The class a hop arrives at, when it is an entity class."""
        relation, direction = hop
        cls = self.range.get(relation) if direction == "out" else self.domain.get(relation)
        return None if cls is None or cls.startswith("type.") else cls


def read_schema(ontology_dir: str | Path) -> Schema:
    """The schema from ``fb_roles(.gz)`` in GrailQA's ontology folder."""
    folder = Path(ontology_dir)
    path = folder / "fb_roles.gz" if (folder / "fb_roles.gz").is_file() else folder / "fb_roles"
    schema = Schema()
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
        for line in f:
            parts = line.split()
            if len(parts) == 3:
                schema.domain[parts[1]] = parts[0]
                schema.range[parts[1]] = parts[2]
    return schema


def anchor_node(anchor: str | Literal) -> Expr:
    return value(anchor) if isinstance(anchor, Literal) else Entity(anchor)


def _step(hop: Hop, inner: Expr) -> Expr:
    relation, direction = hop
    return Join(Reverse(Relation(relation)), inner) if direction == "out" else Join(Relation(relation), inner)


def path_forms(anchor: str | Literal, hops: list[Hop], schema: Schema | None = None) -> list[Top]:
    """The candidate logical forms of one path from ``anchor``; the plain join first."""
    node = anchor_node(anchor)
    firsts: list[Expr] = [_step(hops[0], node)]
    if isinstance(node, Value) and hops[0][1] == "in" and literal_kind(node.literal) is not None:
        firsts += [Compare(op, Relation(hops[0][0]), node) for op in COMPARISONS]
    forms: list[Expr] = firsts
    for hop in hops[1:]:
        forms = [_step(hop, f) for f in forms]
    cls = schema.lands_on(hops[-1]) if schema is not None else None
    if cls is not None:
        forms += [And(Class(cls), f) for f in forms]
    return list(forms)


def with_names(tree: Top, names: dict[str, str | None]) -> str:
    """The text of ``tree`` with each entity id replaced by its name, where it has one."""
    text = to_text(tree)
    for node_id, name in sorted(names.items(), key=lambda kv: -len(kv[0])):
        if name:
            text = text.replace(to_text(Entity(node_id)), to_text(Entity(name)))
    return text
