"""The embedding index of a store: every relation (its name) and every entity (its name, or
its id where it has none) embedded by a sentence encoder, kept on disk beside the store.

An index belongs to the store content it was built from: its ``fingerprint`` is a hash of the
store's statistics (triples, entities, triples per relation). Opening an index against a store
whose statistics differ raises :class:`StaleIndexError`: loading more triples, or pointing at
another store, is detected and refused rather than answered from old vectors. (Content that
changes while every count stays the same would go unnoticed; rebuild after such edits.)

Two searches serve FiDeLiS: cosine top-m over all relations or entities by a text's
embedding (:meth:`EmbeddingIndex.search`, exact: one matrix product over the unit vectors,
docs/design/fidelis-index.md says why no ANN index), and cosine similarity of one query to a given set of relations or entities
(:meth:`EmbeddingIndex.vectors` gathers their rows; ids missing from the index, such as
literals, are embedded on the fly and cached).
"""
from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from engine.errors import InvalidInputError, KGQAError
from engine.graph import NAME_RELATION, Literal, Term
from engine.identifiers import UNBOUNDED
from engine.open import beside_store
from engine.outputs import refuse_input_as_output, written_whole
from engine.store import Store

FORMAT = 1
KINDS = ("relations", "entities")
#: the files an index folder holds
INDEX_FILES = frozenset({"meta.json", *(f"{kind}{ext}" for kind in KINDS for ext in (".npy", ".json"))})
#: ids per ``names`` call while building
NAME_BATCH = 5_000

#: text -> unit vectors (rows), the encoder as FiDeLiS uses it
Encode = Callable[[Sequence[str]], np.ndarray]


class StaleIndexError(KGQAError):
    """The index was built from other store content than the store now holds."""


class IndexNotBuiltError(InvalidInputError):
    """An index that a server would have to build (its operator builds it, with ``kgqa fidelis index``)."""


def fingerprint(store: Store) -> str:
    """A hash of the store's statistics: triples, entities and triples per relation."""
    stats = store.stats()
    text = json.dumps([stats.triples, stats.entities, sorted(stats.relations.items())], separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def index_dir(store: Store, given: str | None = None) -> Path:
    """``given``, else ``<store directory>.fidelis-index`` beside an on-disk embedded store; a
    server store needs one given."""
    directory = Path(given) if given else beside_store(store, ".fidelis-index")
    if directory is None:
        raise InvalidInputError(f"the store {store.uri} is not an embedded store on disk: give --index DIR for its FiDeLiS index")
    if directory.exists() and not directory.is_dir():  # found before minutes of encoding, not after
        raise InvalidInputError(f"the FiDeLiS index path {directory} is a file: give --index DIR, a folder")
    if getattr(store, "path", None):
        refuse_input_as_output(directory, [store.path], what="the FiDeLiS index folder", option="--index")
    if directory.is_dir():
        foreign = sorted(p.name for p in directory.iterdir() if p.name not in INDEX_FILES and not p.name.endswith(".part"))
        if foreign:
            raise InvalidInputError(f"the FiDeLiS index folder {directory} holds files that are not an index's ({', '.join(foreign[:3])}"
                                    f"{', …' if len(foreign) > 3 else ''}): building there would overwrite them; "
                                    "give --index a new or empty folder")
    return directory


def open_index(store: Store, directory: Path, encoder: str | None, device: str | None, *, rebuild: bool, progress: bool,
               build: bool = True) -> EmbeddingIndex:
    """The index of ``store`` at ``directory``: built when missing, rebuilt when stale only if
    ``rebuild``, else refused (:class:`StaleIndexError`). With ``build`` false (a server) a
    missing index, or a rebuild, is refused (:class:`IndexNotBuiltError`) before any model loads."""
    if not build and (rebuild or not (directory / "meta.json").is_file()):
        why = "rebuild_index asks to rebuild the FiDeLiS index" if rebuild else f"there is no FiDeLiS index at {directory}"
        where = "" if directory == beside_store(store, ".fidelis-index") else f" --index {directory}"
        raise IndexNotBuiltError(
            f"{why}, and a server does not build indexes: its operator builds it first with "
            f"`kgqa fidelis index --store {store.uri}{where}{' --force' if rebuild else ''}`"
        )
    name, encode = make_encoder(encoder, device)
    if (directory / "meta.json").is_file():
        index = EmbeddingIndex.load(directory, encode)
        try:
            index.check(store, name, where=f"the FiDeLiS index at {directory}")
            return index
        except StaleIndexError:
            if not rebuild:
                raise
    print(f"building the FiDeLiS index of {store.uri} at {directory}", file=sys.stderr)
    index = EmbeddingIndex.build(store, name, encode, progress=progress)
    index.save(directory)
    return index


def make_encoder(name_or_path: str | None = None, device: str | None = None, batch_size: int = 256) -> tuple[str, Encode]:
    """The encoder's name and a function from texts to unit vectors (float32)."""
    from engine.models.encoders import DEFAULT_ENCODER, load_encoder

    model = load_encoder(name_or_path, device)

    def encode(texts: Sequence[str], progress: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, model.get_sentence_embedding_dimension() or 0), dtype=np.float32)
        vectors = model.encode(
            list(texts), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=progress
        )
        return np.asarray(vectors, dtype=np.float32)

    return name_or_path or DEFAULT_ENCODER, encode


def entity_text(entity: str, name: str | None) -> str:
    """What an entity is embedded as: its name, else its id."""
    return name or entity


def term_text(term: Term) -> str:
    return term.value if isinstance(term, Literal) else term


@dataclass(frozen=True)
class IndexInfo:
    """``meta.json``: what the index was built from and how."""

    format: int
    fingerprint: str
    store: str
    encoder: str
    dim: int
    relations: int
    entities: int
    seconds: float


def check_search_text(text: str) -> None:
    """Refuse a blank text: its embedding is near no relation or entity, so its matches would be noise."""
    if not text.strip():
        raise InvalidInputError("the text to look up is empty: give a few words, e.g. a question or a relation's name")


def _unit(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.where(norms > 0, norms, 1.0)).astype(np.float32)


class EmbeddingIndex:
    """Relation and entity vectors (unit length) with their ids."""

    def __init__(self, info: IndexInfo, keys: dict[str, list[str]], vectors: dict[str, np.ndarray], encode: Encode | None = None) -> None:
        for kind in KINDS:
            if len(keys[kind]) != len(vectors[kind]):
                raise KGQAError(f"index {kind}: {len(keys[kind])} ids but {len(vectors[kind])} vectors; rebuild it")
        self.info = info
        self.keys = keys
        self.matrix = {kind: _unit(np.asarray(vectors[kind], dtype=np.float32).reshape(len(keys[kind]), info.dim)) for kind in KINDS}
        self.row = {kind: {key: i for i, key in enumerate(keys[kind])} for kind in KINDS}
        self.encode = encode
        self._extra: dict[str, np.ndarray] = {}  # text -> vector, for terms outside the index

    # ------------------------------------------------------------------ building and files
    @classmethod
    def build(cls, store: Store, encoder: str | None = None, encode: Encode | None = None, *, progress: bool = True) -> EmbeddingIndex:
        """Embed every relation and every entity of ``store`` (batched; names fetched in batches)."""
        from tqdm import tqdm

        if encode is None:
            encoder, encode = make_encoder(encoder)
        started = time.perf_counter()
        stamp = fingerprint(store)
        relations = [r for r in store.relation_names() if r != NAME_RELATION]
        entities = store.entities(limit=UNBOUNDED).ids
        if not relations or not entities:
            raise InvalidInputError(f"the store {store.uri!r} holds no triples to index: load a graph first with `kgqa load`")
        texts: list[str] = []
        bar = tqdm(total=len(entities), desc="entity names", unit="id", disable=not progress, file=sys.stderr)
        for start in range(0, len(entities), NAME_BATCH):
            chunk = entities[start : start + NAME_BATCH]
            names = store.names(chunk)
            texts += [entity_text(e, names.get(e)) for e in chunk]
            bar.update(len(chunk))
        bar.close()
        rel_vectors = encode(relations)
        ent_vectors = encode(texts, progress) if progress else encode(texts)
        info = IndexInfo(FORMAT, stamp, store.uri, encoder or "", int(rel_vectors.shape[1]), len(relations), len(entities),
                         round(time.perf_counter() - started, 3))
        return cls(info, {"relations": relations, "entities": entities}, {"relations": rel_vectors, "entities": ent_vectors}, encode)

    def save(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        # meta.json out first and in last: a directory without it is an unfinished build, so a
        # rebuild stopped part way never leaves the old meta.json over a mix of old and new files
        (directory / "meta.json").unlink(missing_ok=True)
        for kind in KINDS:
            with written_whole(directory / f"{kind}.npy") as partial, partial.open("wb") as f:
                np.save(f, self.matrix[kind])
            with written_whole(directory / f"{kind}.json") as partial:
                partial.write_text(json.dumps(self.keys[kind], ensure_ascii=False), encoding="utf-8")
        with written_whole(directory / "meta.json") as partial:
            partial.write_text(json.dumps(asdict(self.info), indent=2), encoding="utf-8")
        return directory

    @classmethod
    def load(cls, directory: str | Path, encode: Encode | None = None) -> EmbeddingIndex:
        directory = Path(directory)
        meta = directory / "meta.json"
        if not meta.is_file():
            raise InvalidInputError(f"no FiDeLiS index at {directory}: build one with `kgqa fidelis index --store …`")
        try:
            info = IndexInfo(**json.loads(meta.read_text(encoding="utf-8")))
            if info.format != FORMAT:
                raise ValueError(f"format {info.format}, expected {FORMAT}")
            keys = {kind: json.loads((directory / f"{kind}.json").read_text(encoding="utf-8")) for kind in KINDS}
            vectors = {kind: np.load(directory / f"{kind}.npy") for kind in KINDS}
        except (OSError, ValueError, TypeError) as e:
            raise KGQAError(f"the FiDeLiS index at {directory} is unreadable ({e}): rebuild it with `kgqa fidelis index`") from e
        return cls(info, keys, vectors, encode)

    def check(self, store: Store, encoder: str | None = None, where: str = "the index") -> None:
        """Refuse a store whose content differs from the one indexed, or another encoder."""
        if fingerprint(store) != self.info.fingerprint:
            raise StaleIndexError(
                f"{where} was built from other content than {store.uri} now holds (its statistics differ: "
                f"{self.info.entities} entities and {self.info.relations} relations were indexed): rebuild it with "
                f"`kgqa fidelis index --store {store.uri}`"
            )
        if encoder is not None and encoder != self.info.encoder:
            raise InvalidInputError(
                f"{where} was built with the encoder {self.info.encoder!r}, not {encoder!r}: "
                "query with the same encoder or rebuild the index"
            )

    # ------------------------------------------------------------------ searching
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.encode is None:
            raise KGQAError("this index was opened without an encoder: it cannot embed text")
        return _unit(self.encode(list(texts)))

    def vectors(self, kind: str, terms: Sequence[Term]) -> np.ndarray:
        """The unit vectors of ``terms`` (rows in order); a term the index lacks (a literal, a
        relation name it never saw) is embedded by its text, once per process."""
        if kind not in KINDS:
            raise InvalidInputError(f"unknown index kind {kind!r}: use {' or '.join(KINDS)}")
        row = self.row[kind]
        rows = np.array([row.get(t, -1) if isinstance(t, str) else -1 for t in terms], dtype=np.int64)
        out = self.matrix[kind][np.maximum(rows, 0)] if len(rows) else np.zeros((0, self.info.dim), np.float32)
        missing = np.flatnonzero(rows < 0)
        if len(missing):
            texts = [term_text(terms[i]) for i in missing]
            new = sorted({t for t in texts if t not in self._extra})
            if new:
                for text, vector in zip(new, self.embed(new)):
                    self._extra[text] = vector
            out = out.copy()
            out[missing] = np.stack([self._extra[t] for t in texts])
        return out

    def search(self, text: str, kind: str, m: int = 10) -> list[tuple[str, float]]:
        """The ``m`` relations or entities most similar (cosine) to ``text``, best first."""
        if kind not in KINDS:
            raise InvalidInputError(f"unknown index kind {kind!r}: use {' or '.join(KINDS)}")
        if m < 1:
            raise InvalidInputError(f"m must be at least 1, not {m}")
        check_search_text(text)
        scores = self.matrix[kind] @ self.embed([text])[0]
        m = min(m, len(scores))
        top = np.argpartition(-scores, m - 1)[:m]
        top = top[np.lexsort((top, -scores[top]))]  # best first, ties by position
        return [(self.keys[kind][r], float(scores[r])) for r in top]
