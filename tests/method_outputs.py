"""Every method's output on a tiny movie graph, with the offline models: the records
``kgqa <method> run`` writes (less their seconds), held in tests/golden/methods/ so that a
change to a method's code that changes its predictions, traces or store calls shows up as a
diff. Regenerate with ``python -m tests.method_outputs`` and review the diff."""
from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.graph import Triple
from engine.methods.registry import specs
from engine.methods.run import run_method
from engine.methods.spec import Models, make_config
from loaders.questions import Question

GOLDEN = Path(__file__).parent / "golden" / "methods"

KB = [
    ("Titanic", "directed_by", "James Cameron"),
    ("Avatar", "directed_by", "James Cameron"),
    ("Inception", "directed_by", "Christopher Nolan"),
    ("Interstellar", "directed_by", "Christopher Nolan"),
    ("The Departed", "directed_by", "Martin Scorsese"),
    ("Titanic", "starred_actors", "Leonardo DiCaprio"),
    ("Inception", "starred_actors", "Leonardo DiCaprio"),
    ("The Departed", "starred_actors", "Leonardo DiCaprio"),
    ("Avatar", "starred_actors", "Sam Worthington"),
    ("Interstellar", "starred_actors", "Matthew McConaughey"),
    ("Avatar", "has_genre", "Science Fiction"),
    ("Inception", "has_genre", "Science Fiction"),
    ("Interstellar", "has_genre", "Science Fiction"),
    ("Titanic", "has_genre", "Romance"),
    ("Titanic", "release_year", "1997"),
    ("Avatar", "release_year", "2009"),
    ("Inception", "release_year", "2010"),
]
TRIPLES = [Triple(s, r, o) for s, r, o in KB]

QUESTIONS = [
    Question("q1", "who directed [Titanic]", ["James Cameron"], ["Titanic"], ["James Cameron"], hops=1,
             path=["directed_by"]),
    Question("q2", "what movies did [Christopher Nolan] direct", ["Inception", "Interstellar"], ["Christopher Nolan"],
             ["Inception", "Interstellar"], hops=1, path=["directed_by"]),
    Question("q3", "which genre is [Avatar]", ["Science Fiction"], ["Avatar"], ["Science Fiction"], hops=1,
             path=["has_genre"]),
    Question("q4", "who acted in the movies directed by [James Cameron]", ["Leonardo DiCaprio", "Sam Worthington"],
             ["James Cameron"], ["Leonardo DiCaprio", "Sam Worthington"], hops=2, path=["directed_by", "starred_actors"]),
]

#: each method's options: small enough for a CPU, a batch of three and one alone
OPTIONS: dict[str, dict[str, Any]] = {
    "rog": {"model": "SmolLM2-135M-Instruct", "answer_mode": "llm", "k": 2, "max_hops": 2, "answer_tokens": 16,
            "batch_size": 3},
    "ldr": {"batch_size": 3, "match_names": True},
    "fidelis": {"width": 2, "depth": 2, "top_n": 5, "batch_size": 3, "plan_tokens": 48, "rank_tokens": 16,
                "answer_tokens": 16},
    "arg": {"model": "SmolLM2-135M-Instruct", "k": 5, "batch_size": 3, "n_demos": 0},
    "etd": {"batch_size": 3, "top_n": 2},
}


def etd_checkpoint(store: Any, directory: Path) -> str:
    """A small GNN trained for two epochs on the questions (seeded: the same weights every time)."""
    from engine.methods.etd.config import TrainConfig
    from engine.methods.etd.training import train

    config = TrainConfig.for_dataset("metaqa-1hop", num_layers=2, top_k=10, dim=16, epochs=2, batch_size=4, lr=0.01)
    train(store, QUESTIONS, QUESTIONS, config, directory, progress=False)
    return str(directory / "best.pt")


def hashed_choice(prompt: str, options: Sequence[str]) -> Any:
    """The same choice for the same (prompt, options), whichever batch asks, with scores."""
    import hashlib

    from engine.methods.lockstep import Choice

    digest = int(hashlib.sha256((prompt + "\x00" + "\x00".join(options)).encode()).hexdigest(), 16)
    return Choice(digest % len(options), [float((digest >> (8 * i)) % 97) for i in range(len(options))])


def outputs(name: str, store: Any, workdir: Path) -> list[dict[str, Any]]:
    """The records of ``name`` on :data:`QUESTIONS` (``seconds`` left out, and FiDeLiS's ``embedding_seconds``: they are timings)."""
    spec = specs()[name]
    values = dict(OPTIONS[name])
    if name == "fidelis":
        values["index"] = str(workdir / "fidelis-index")
    if name == "etd":
        values["checkpoint"] = etd_checkpoint(store, workdir / "etd")
    config, models = make_config(spec.config, values), Models(progress=False)
    if name == "ldr":  # the untrained model stops at once: a chooser that looks arbitrary walks further
        from engine.methods.ldr.pipeline import LdrMethod

        method: Any = LdrMethod(store, models, config, hashed_choice)
    else:
        method = spec.build(config, store, models)
    records: list[dict[str, Any]] = []
    run_method(method, QUESTIONS, progress=False, on_record=records.append)
    for record in records:
        del record["seconds"]
        if name == "fidelis":
            del record[name]["embedding_seconds"]
    return json.loads(json.dumps(records, ensure_ascii=False))


def same(got: Any, want: Any, where: str = "") -> list[str]:
    """Where ``got`` differs from ``want`` (floats to 1e-4: beam scores and probabilities)."""
    if isinstance(want, float) or isinstance(got, float):
        ok = isinstance(got, int | float) and isinstance(want, int | float) and abs(got - want) <= 1e-4
        return [] if ok else [f"{where}: {got!r} != {want!r}"]
    if isinstance(want, dict) and isinstance(got, dict):
        if set(got) != set(want):
            return [f"{where}: keys {sorted(got)} != {sorted(want)}"]
        return [d for k in want for d in same(got[k], want[k], f"{where}.{k}")]
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return [f"{where}: {len(got)} items != {len(want)}: {got!r} != {want!r}"]
        return [d for i, (g, w) in enumerate(zip(got, want)) for d in same(g, w, f"{where}[{i}]")]
    return [] if got == want else [f"{where}: {got!r} != {want!r}"]


def main(names: list[str]) -> None:
    import tempfile

    from engine.open import open_store

    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name in names or sorted(OPTIONS):
        with tempfile.TemporaryDirectory() as tmp:
            with open_store(str(Path(tmp) / "store")) as store:
                store.add_triples(TRIPLES)
            with open_store(str(Path(tmp) / "store"), read_only=True) as store:
                records = outputs(name, store, Path(tmp))
        (GOLDEN / f"{name}.json").write_text(json.dumps(records, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{name}: {len(records)} records written to {GOLDEN / f'{name}.json'}")


if __name__ == "__main__":
    main(sys.argv[1:])
