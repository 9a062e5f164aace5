"""A token trie: the allowed continuations of a set of token sequences, for constrained decoding."""
from __future__ import annotations

from collections.abc import Iterable, Sequence


class TokenTrie:
    """Token sequences stored as nested dicts; ``END`` marks where a sequence finishes.

    A node is the dict reached by walking some prefix; :meth:`node` finds it, :meth:`next_tokens`
    lists the tokens that continue it, :meth:`ends_at` says whether a whole sequence ends there.
    """

    END = -1

    def __init__(self, sequences: Iterable[Sequence[int]] = ()) -> None:
        self.root: dict[int, dict] = {}
        self.longest = 0
        for sequence in sequences:
            self.add(sequence)

    def add(self, sequence: Sequence[int]) -> None:
        if not sequence:
            raise ValueError("a token trie cannot hold an empty sequence")
        node = self.root
        for token in sequence:
            node = node.setdefault(int(token), {})
        node[self.END] = {}
        self.longest = max(self.longest, len(sequence))

    def node(self, prefix: Sequence[int]) -> dict[int, dict] | None:
        """The node reached by ``prefix``, or None when no sequence starts with it."""
        node = self.root
        for token in prefix:
            node = node.get(int(token))  # type: ignore[assignment]
            if node is None:
                return None
        return node

    @classmethod
    def next_tokens(cls, node: dict[int, dict]) -> list[int]:
        return [t for t in node if t != cls.END]

    @classmethod
    def ends_at(cls, node: dict[int, dict]) -> bool:
        return cls.END in node

    def __contains__(self, sequence: Sequence[int]) -> bool:
        node = self.node(sequence)
        return node is not None and self.ends_at(node)
