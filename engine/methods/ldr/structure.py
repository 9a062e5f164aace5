"""G_k and S_k (LDR §2.1, §3.1, Appendix A): the retrieved tree and its abstract structure.

G_k is a tree rooted at the start entity: every entity occurrence is a *member* that keeps
the stored triple linking it to its parent member, so one entity met twice is two members.
S_k groups members into *semantic nodes*: the members found from the members of one node by
one relation in one direction form one node. A node is named ``type_id`` — ``type`` the most
common type of its members (ties in the order entity, topic, num, date), ``id`` its position
in S_k (the start node is 0 and keeps the start entity's real name). Types (Appendix A):

- ``num`` / ``date``: a number / date or time literal (the typed-literal kinds of
  :func:`engine.sexpr.tree.literal_kind`);
- ``topic``: a Freebase id (``m.…``, ``g.…``) without a name, i.e. a CVT;
- ``entity``: anything else (named entities, string literals, and datasets whose ids are
  names, such as MetaQA's).

S_k renders as the paper's triples, ``('Knight Rider', 'tv.tv_program.regular_cast',
'topic_1')``, in the stored orientation: a node reached against the stored direction is the
subject of its triple.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from engine.graph import Literal, Term, Triple
from engine.sexpr.tree import FREEBASE_ID, literal_kind

ENTITY, TOPIC, NUM, DATE = "entity", "topic", "num", "date"
TYPES = (ENTITY, TOPIC, NUM, DATE)


def entity_type(term: Term, named: bool) -> str:
    """The LDR type of one entity or literal; ``named``: the store has a name for it."""
    if isinstance(term, Literal):
        kind = literal_kind(term)
        return NUM if kind == "number" else DATE if kind == "time" else ENTITY
    return TOPIC if not named and FREEBASE_ID.fullmatch(term) else ENTITY


def term_text(term: Term) -> str:
    return term.value if isinstance(term, Literal) else term


@dataclass(frozen=True)
class Member:
    """One entity occurrence in G_k: ``edge`` is the stored triple to its ``parent`` member
    (both None at the root); ``node`` the semantic node grouping it."""

    term: Term
    parent: int | None
    edge: Triple | None
    node: int


@dataclass
class Node:
    """A semantic node of S_k: the members reached from the members of node ``parent`` by
    ``relation`` (``forward``: in the stored direction)."""

    index: int
    name: str
    type: str
    parent: int | None = None
    relation: str | None = None
    forward: bool = True
    members: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Child:
    """A member to add: the entity met from member ``parent`` through the stored ``edge``."""

    parent: int
    term: Term
    edge: Triple


class Subgraph:
    """G_k (``members``, a tree) and S_k (``nodes``) of one question."""

    def __init__(self, start: str, start_name: str | None = None) -> None:
        self.members: list[Member] = [Member(start, None, None, 0)]
        self.nodes: list[Node] = [Node(0, start_name or start, entity_type(start, start_name is not None), members=[0])]

    @property
    def start(self) -> str:
        return self.members[0].term  # type: ignore[return-value]

    def add_node(
        self,
        parent: int,
        relation: str,
        forward: bool,
        children: Iterable[Child],
        named: Collection[str] = (),
        kind: str | None = None,
    ) -> Node:
        """A new semantic node holding ``children``; ``named``: the ids the store has a name
        for; ``kind`` sets the type instead (gold structures built without a store)."""
        index = len(self.nodes)
        uids: list[int] = []
        for child in children:
            if self.members[child.parent].node != parent:
                raise ValueError(f"member {child.parent} is not in node {parent}")
            uids.append(len(self.members))
            self.members.append(Member(child.term, child.parent, child.edge, index))
        if kind is None:
            kind = node_type(entity_type(self.members[u].term, self.members[u].term in named) for u in uids)
        elif kind not in TYPES:
            raise ValueError(f"unknown node type {kind!r}: use one of {', '.join(TYPES)}")
        node = Node(index, f"{kind}_{index}", kind, parent, relation, forward, uids)
        self.nodes.append(node)
        return node

    # ------------------------------------------------------------------ S_k
    def abstract_triples(self) -> list[tuple[str, str, str]]:
        """S_k: one (subject, relation, object) per node after the start, in stored orientation."""
        out = []
        for node in self.nodes[1:]:
            parent = self.nodes[node.parent].name  # type: ignore[index]
            out.append((parent, node.relation, node.name) if node.forward else (node.name, node.relation, parent))
        return out  # type: ignore[return-value]

    def render(self) -> str:
        """S_k as the prompts show it: the triples, or only the start entity's name."""
        if len(self.nodes) == 1:
            return self.nodes[0].name
        return ", ".join(repr(t) for t in self.abstract_triples())

    # ------------------------------------------------------------------ G_k
    def triples(self, removed: Collection[int] = ()) -> list[Triple]:
        """G_k's concrete triples (each once), members in ``removed`` left out."""
        return list(dict.fromkeys(m.edge for uid, m in enumerate(self.members) if m.edge is not None and uid not in removed))

    def terms(self, node: int, removed: Collection[int] = ()) -> list[Term]:
        """The distinct entities of a node, in member order, members in ``removed`` left out."""
        return list(dict.fromkeys(self.members[u].term for u in self.nodes[node].members if u not in removed))

    def ids(self, node: int) -> list[str]:
        """The distinct entity ids (not literals) of a node: what the store can expand."""
        return [t for t in self.terms(node) if not isinstance(t, Literal)]

    def first_hops(self) -> list[int | None]:
        """For every member, the member under the root whose subtree holds it (None for the root)."""
        out: list[int | None] = []
        for uid, m in enumerate(self.members):  # a parent always comes before its children
            out.append(None if m.parent is None else uid if m.parent == 0 else out[m.parent])
        return out

    def first_hop_node(self, node: int) -> int | None:
        """The node under the start node on the way to ``node`` (None for the start node)."""
        if node == 0:
            return None
        while self.nodes[node].parent != 0:
            node = self.nodes[node].parent  # type: ignore[assignment]
        return node

    def to_json(self) -> dict:
        return {
            "nodes": [
                {"name": n.name, "type": n.type, "parent": n.parent, "relation": n.relation, "forward": n.forward, "size": len(n.members)}
                for n in self.nodes
            ],
            "s_k": [list(t) for t in self.abstract_triples()],
        }


def node_type(types: Iterable[str]) -> str:
    """The most common of ``types`` (ties in :data:`TYPES` order); ``entity`` when empty."""
    counts = Counter(types)
    if not counts:
        return ENTITY
    return max(TYPES, key=lambda t: (counts[t], -TYPES.index(t)))

