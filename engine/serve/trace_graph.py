"""A method's record (the run protocol's record of one question, with its trace) as one uniform
graph that the question explorer draws: nodes and edges, each with roles.

| role | on | meaning |
|---|---|---|
| ``topic`` | node | a topic entity of the question |
| ``answer`` | node | an answer the method predicted |
| ``gold`` | node, edge | a gold answer; an edge of the dataset's gold path |
| ``variable`` | node | an unknown of a logical form (ARG's S-expressions) |
| ``explored`` | edge | on a path the method looked at |
| ``chosen`` | edge | on a path the method answered from (that ends at an answer, where any does); for a method that keeps no choice of its own (RoG), a path ending at its first answer |

Each method keeps its reasoning under its own keys (:data:`READERS`, one reader per method,
reading the record's keys as the method writes them); a method without a reader is read for a
``paths`` list, as RoG writes it. Edges point the stored way (subject → object). Nodes are
keyed by their display name: an id and the name a rendered path shows for it are one node (two
entities sharing a name are drawn as one).
"""
from __future__ import annotations

import hashlib
import itertools
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.errors import KGQAError
from engine.sexpr import tree
from engine.sexpr.parser import parse

#: the most edges a view holds (a hub's neighbourhood would swamp the page); the rest are cut
MAX_EDGES = 400
#: the most gold-path walks drawn
MAX_GOLD_WALKS = 20


@dataclass(frozen=True)
class Ref:
    """A node as a trace names it: by ``id`` (drawn with its name), by ``label`` (a name or a
    value as a rendered path shows it), or a logical form's ``var`` (its key unique per form)."""

    kind: str
    text: str


@dataclass(frozen=True)
class Hop:
    """One edge, the stored way; ``forward`` is false where the walk went against it (from
    ``dst`` to ``src``)."""

    src: Ref
    relation: str
    dst: Ref
    forward: bool = True


Walk = list[Hop]


@dataclass
class Reading:
    """What a reader found in a trace: the walks the method explored and those it chose."""

    explored: list[Walk]
    chosen: list[Walk]


def ident(text: str) -> Ref:
    return Ref("id", text)


def label(text: str) -> Ref:
    return Ref("label", text)


# ------------------------------------------------------------------ rendered paths and their ends
_HOP = re.compile(r" (→|←) (\S+) \1 ")


def rendered_walk(text: str) -> Walk:
    """``A → r → B ← s ← C`` (:func:`engine.render.render_path`) as hops, the stored way."""
    parts = _HOP.split(text)
    hops: Walk = []
    for i in range(0, len(parts) - 3, 3):
        here, arrow, relation, there = parts[i], parts[i + 1], parts[i + 2], parts[i + 3]
        a, b = label(here), label(there)
        hops.append(Hop(a, relation, b) if arrow == "→" else Hop(b, relation, a, False))
    return hops


def path_walk(path: Mapping[str, Any]) -> Walk:
    """A path as the API writes it (``{nodes, relations, forward}``) as hops, the stored way."""
    nodes = [n if isinstance(n, str) else str(n.get("value", n)) for n in path["nodes"]]
    forward = path.get("forward") or [True] * len(path["relations"])
    return [
        Hop(ident(nodes[i]), r, ident(nodes[i + 1])) if f else Hop(ident(nodes[i + 1]), r, ident(nodes[i]), False)
        for i, (r, f) in enumerate(zip(path["relations"], forward))
    ]


def _walks(items: Iterable[Any]) -> list[Walk]:
    walks = []
    for item in items:
        if isinstance(item, str):
            walks.append(rendered_walk(item))
        elif isinstance(item, Mapping) and "nodes" in item and "relations" in item:
            walks.append(path_walk(item))
    return [w for w in walks if w]


def _end(walk: Walk) -> Ref:
    """Where a walk ends."""
    last = walk[-1]
    return last.dst if last.forward else last.src


def ending_in_answers(walks: list[Walk], predictions: Sequence[str], label_of: Callable[[Ref], str]) -> list[Walk]:
    """The walks whose end is one of the predictions (any case), or named in one (a method whose
    language model answers in a sentence); each end is checked against all predictions at once."""
    folded = [p.casefold() for p in predictions]
    exact = set(folded)
    joined = "\x00".join(folded)  # one search over every prediction (an end holding a NUL is matched exactly only)

    def answered(text: str) -> bool:
        end = text.casefold()
        return end in exact or (len(end) > 2 and "\x00" not in end and end in joined)

    return [w for w in walks if answered(label_of(_end(w)))]


# ------------------------------------------------------------------------------- the readers
def read_paths(trace: Mapping[str, Any], record: Mapping[str, Any]) -> Reading:
    """``paths`` (rendered, or ``{nodes, relations, forward}``), every one explored (RoG, and any
    method without a reader): :func:`view` chooses those that end at the first answer."""
    return Reading(_walks(trace.get("paths") or []), [])


def read_fidelis(trace: Mapping[str, Any], record: Mapping[str, Any]) -> Reading:
    """Every candidate path a beam step scored and every beam explored; the reasoning paths the
    answer came from chosen."""
    seen: list[Any] = []
    for search in trace.get("searches") or []:
        for step in search.get("steps") or []:
            seen += [item[0] for item in step.get("top") or [] if item]
            seen += step.get("beams") or []
        seen += search.get("paths") or []
    final = _walks(trace.get("paths") or [])
    return Reading(_walks(dict.fromkeys(seen)) + final, final)


def read_etd(trace: Mapping[str, Any], record: Mapping[str, Any]) -> Reading:
    """Each candidate's evidence path explored; the predicted candidate's chosen."""
    predicted = set(record.get("prediction_ids") or []) | set(record.get("prediction") or [])
    explored, chosen = [], []
    for candidate in trace.get("candidates") or []:
        walk = [Hop(label(s), r, label(o)) for s, r, o in candidate.get("evidence") or []]
        if not walk:
            continue
        explored.append(walk)
        if candidate.get("id") in predicted or candidate.get("name") in predicted:
            chosen.append(walk)
    return Reading(explored, chosen)


def read_ldr(trace: Mapping[str, Any], record: Mapping[str, Any]) -> Reading:
    """The reasoning subgraph G_k explored; a shortest walk in it from the topic to each
    predicted answer chosen."""
    edges = [Hop(ident(s), r, ident(o)) for s, r, o in trace.get("g_k") or []]
    starts = {ident(t) for t in record.get("topic") or []}
    ends = {ident(a) for a in record.get("prediction_ids") or []}
    return Reading([[e] for e in edges], _shortest(edges, starts, ends))


def _shortest(edges: list[Hop], starts: set[Ref], ends: set[Ref]) -> list[Walk]:
    """A shortest walk over ``edges`` (either way) from one of ``starts`` to each of ``ends``
    that one reaches: one breadth-first search for all of them."""
    around: dict[Ref, list[tuple[Hop, Ref]]] = {}
    for e in edges:
        around.setdefault(e.src, []).append((e, e.dst))
        around.setdefault(e.dst, []).append((e, e.src))
    came: dict[Ref, tuple[Hop, Ref] | None] = {s: None for s in starts if s in around}
    queue = deque(came)
    while queue:
        here = queue.popleft()
        for hop, there in around.get(here, []):
            if there not in came:
                came[there] = (hop, here)
                queue.append(there)
    walks: list[Walk] = []
    for end in ends:
        walk: Walk = []
        here = end
        while came.get(here) is not None:
            hop, here = came[here]  # type: ignore[misc]
            walk.append(hop)
        if walk:
            walks.append(walk[::-1])
    return walks


def read_arg(trace: Mapping[str, Any], record: Mapping[str, Any]) -> Reading:
    """Every reference, generated and executed S-expression drawn as its query graph
    (unknowns as variables) explored; the one whose answers were returned chosen, its result
    variable linked to the predicted answers."""
    forms = [*(trace.get("references") or []), *(trace.get("generated") or []), *(trace.get("executed") or [])]
    explored = [w for w in (sexpr_walk(f) for f in dict.fromkeys(f for f in forms if isinstance(f, str))) if w]
    chosen = []
    final = trace.get("sexpr")
    if isinstance(final, str) and (walk := sexpr_walk(final)):
        root = Ref("var", _form_key(final) + ":0")
        answers = record.get("prediction_ids") or record.get("prediction") or []
        chosen = [walk + [Hop(root, "answer", ident(a)) for a in answers]]
    return Reading(explored, chosen)


def _form_key(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def sexpr_walk(text: str) -> Walk:
    """An S-expression's query graph: a variable per set it joins, edges the stored way, its
    result variable ``…:0``; [] for a form that does not parse."""
    try:
        top = parse(text)
    except KGQAError:
        return []
    key = _form_key(text)
    hops: Walk = []
    count = itertools.count(1)

    def var(given: Ref | None) -> Ref:
        return given or Ref("var", f"{key}:{next(count)}")

    def rel_hop(here: Ref, rel: tree.Rel, there: Ref) -> Hop:
        # (JOIN r X) is {e : e r x}: the set's node is the subject; (JOIN (R r) X) the object
        if isinstance(rel, tree.Reverse):
            return Hop(there, rel.relation.name, here)
        return Hop(here, rel.name, there)

    def node(expr: Any, at: Ref | None = None) -> Ref:
        if isinstance(expr, tree.Count):
            return node(expr.arg, at)
        if isinstance(expr, tree.Entity):
            ref = ident(expr.id)
            if at is not None:
                hops.append(Hop(at, "is", ref))
            return at or ref
        if isinstance(expr, tree.Value):
            ref = label(expr.text)
            if at is not None:
                hops.append(Hop(at, "is", ref))
            return at or ref
        if isinstance(expr, tree.Class):
            here = var(at)
            hops.append(Hop(here, "type.object.type", label(expr.name)))
            return here
        if isinstance(expr, tree.Join):
            here = var(at)
            hops.append(rel_hop(here, expr.relation, node(expr.arg)))
            return here
        if isinstance(expr, tree.And):
            here = var(at)
            node(expr.left, here)
            node(expr.right, here)
            return here
        if isinstance(expr, tree.Extreme):
            here = node(expr.arg, at)
            step = here
            for rel in tree.path_hops(expr.path):
                nxt = var(None)
                hops.append(rel_hop(step, rel, nxt))
                step = nxt
            hops.append(Hop(step, expr.op, label(expr.op)))
            return here
        if isinstance(expr, tree.Compare):
            here = var(at)
            hops.append(Hop(here, expr.relation.name, label(f"{expr.op} {expr.value.text}")))
            return here
        if isinstance(expr, tree.TimeConstraint):
            here = node(expr.arg, at)
            hops.append(Hop(here, expr.relation.name, label(f"in {expr.year}")))
            return here
        return var(at)

    node(top, Ref("var", f"{key}:0"))
    return hops


#: method name → its reader (a method not named here is read by :func:`read_paths`)
READERS: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], Reading]] = {
    "rog": read_paths,
    "fidelis": read_fidelis,
    "etd": read_etd,
    "ldr": read_ldr,
    "arg": read_arg,
}


# ------------------------------------------------------------------------------ the view
def ids_to_name(reading: Reading, record: Mapping[str, Any], gold: list[Walk]) -> list[str]:
    """Every id the view shows, to look its name up once."""
    found: dict[str, None] = {}
    for key in ("topic", "answer_ids", "prediction_ids"):
        found.update(dict.fromkeys(x for x in record.get(key) or [] if isinstance(x, str) and x))
    for walk in (*reading.explored, *reading.chosen, *gold):
        for hop in walk:
            found.update(dict.fromkeys(r.text for r in (hop.src, hop.dst) if r.kind == "id"))
    return list(found)


def read(method: str, record: Mapping[str, Any]) -> Reading:
    """The walks in ``record``'s trace (under ``trace``, as ``/v1/answer`` answers, or under the
    method's name, as ``kgqa <method> run`` writes it)."""
    trace = record.get("trace", record.get(method)) or {}
    if not isinstance(trace, Mapping):
        return Reading([], [])
    return READERS.get(method, read_paths)(trace, record)


def view(method: str, record: Mapping[str, Any], names: Mapping[str, str | None], gold: list[Walk] | None = None,
         reading: Reading | None = None) -> dict[str, Any]:
    """The graph of ``record``: ``{nodes: [{id, label, roles}], edges: [{id, source, target,
    relation, roles}], truncated}``. ``names`` names the ids (:func:`ids_to_name`); ``gold``
    holds the gold path's walks on the store."""
    reading = reading or read(method, record)
    gold = gold or []

    def label_of(ref: Ref) -> str:
        if ref.kind == "id":
            return names.get(ref.text) or ref.text
        return "?" if ref.kind == "var" else ref.text

    def key_of(ref: Ref) -> str:
        return f"?{ref.text}" if ref.kind == "var" else label_of(ref)

    predicted = [label_of(ident(p)) for p in record.get("prediction_ids") or []] or list(record.get("prediction") or [])
    if reading.chosen:  # the walks the method answered from: those ending at an answer, where any do
        chosen = ending_in_answers(reading.chosen, predicted, label_of) or reading.chosen
    else:  # a method that keeps no choice of its own: the walks ending at its first answer
        chosen = ending_in_answers(reading.explored, predicted[:1], label_of)
    nodes: dict[str, dict[str, Any]] = {}
    edges: dict[tuple[str, str, str], dict[str, Any]] = {}
    truncated = False

    def add_node(ref: Ref, *roles: str) -> str:
        key = key_of(ref)
        found = nodes.setdefault(key, {"id": f"n{len(nodes)}", "label": label_of(ref), "roles": []})
        if ref.kind == "var" and "variable" not in found["roles"]:
            found["roles"].append("variable")
        found["roles"] += [r for r in roles if r not in found["roles"]]
        return found["id"]

    def add_walks(walks: list[Walk], roles: tuple[str, ...]) -> None:
        nonlocal truncated
        for walk in walks:
            for hop in walk:
                key = (key_of(hop.src), hop.relation, key_of(hop.dst))
                if key not in edges:
                    if len(edges) >= MAX_EDGES:
                        truncated = True
                        continue
                    source, target = add_node(hop.src), add_node(hop.dst)
                    edges[key] = {"id": f"e{len(edges)}", "source": source, "target": target, "relation": hop.relation,
                                  "roles": []}
                edges[key]["roles"] += [r for r in roles if r not in edges[key]["roles"]]

    for topic in record.get("topic") or []:
        add_node(ident(topic), "topic")
    add_walks(chosen, ("explored", "chosen"))
    add_walks(reading.explored, ("explored",))
    add_walks(gold, ("gold",))
    marker = _Marker(nodes, add_node)
    marker.mark(predicted, "answer")
    gold_answers = [label_of(ident(a)) for a in record.get("answer_ids") or []] + list(record.get("answers") or [])
    marker.mark(list(dict.fromkeys(gold_answers)), "gold")
    return {"nodes": list(nodes.values()), "edges": list(edges.values()), "truncated": truncated}


class _Marker:
    """Gives a role to the node each text names: the node shown as the text (any case), or, for a
    sentence, each node of the drawn graph whose label (of three characters or more) it holds; a
    text that names none gets a node of its own. Lookups go through dicts, so that marking is
    linear in the texts and never scans every node per text."""

    def __init__(self, nodes: dict[str, dict[str, Any]], add_node: Callable[..., str]) -> None:
        self.nodes, self.add_node = nodes, add_node
        self.by_fold: dict[str, list[str]] = {}
        for key, node in nodes.items():
            self._index(key, node)
        # a sentence is matched against the drawn graph (at most MAX_EDGES edges' ends and the
        # topics), not against the nodes earlier texts added
        self.graph = [(n["label"].casefold(), k) for k, n in nodes.items()
                      if "variable" not in n["roles"] and len(n["label"]) > 2]

    def _index(self, key: str, node: dict[str, Any]) -> None:
        if "variable" not in node["roles"]:
            self.by_fold.setdefault(node["label"].casefold(), []).append(key)

    def mark(self, texts: list[Any], role: str) -> None:
        for text in texts:
            if not isinstance(text, str) or not text:
                continue
            if text in self.nodes:
                self.add_node(label(text), role)
                continue
            folded = text.casefold()
            named = dict.fromkeys(self.by_fold.get(folded, ()))
            named.update((k, None) for f, k in self.graph if f in folded)
            for key in named:
                self.add_node(label(key), role)
            if not named:
                self.add_node(label(text), role)
                self._index(text, self.nodes[text])


def gold_walks(paths: list[Mapping[str, Any]], forward: Sequence[bool] | None, gold_ids: set[str],
               gold_names: set[str], names: Mapping[str, str | None]) -> list[Walk]:
    """The gold path's walks (``follow_paths`` answers from the topic entities, as JSON): those
    walked the way the dataset says (``forward``, where it says) that end at a gold answer, or
    all of them when none does; at most :data:`MAX_GOLD_WALKS`."""
    kept = [p for p in paths if forward is None or list(p.get("forward") or []) == list(forward)]

    def at_gold(p: Mapping[str, Any]) -> bool:
        end = p["nodes"][-1]
        end = end if isinstance(end, str) else str(end.get("value"))
        return end in gold_ids or (names.get(end) or end) in gold_names

    ending = [p for p in kept if at_gold(p)] or kept
    return [path_walk(p) for p in ending[:MAX_GOLD_WALKS]]
