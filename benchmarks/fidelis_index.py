"""FiDeLiS's embedding index: build throughput and size per store, and the search backends
compared on the index's own vectors.

    python -m benchmarks.fidelis_index --store kgqa-data/metaqa --store kgqa-data/fb15k

For each store: seconds to enumerate the entities, fetch their names and embed everything
(items/s), the index's size on disk; then, over its entity matrix, the time of one top-10
search and of one similarity over 20,000 given ids with numpy (what the index uses), and
with faiss's flat index and usearch's HNSW graph (build time included) when installed.
Results go to ``benchmarks/results/fidelis-index/<store name>.json``.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "fidelis-index"


def _best(fn: Callable[[], object], repeat: int = 5) -> float:
    """Best of ``repeat`` timings, in milliseconds (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(min(times) * 1000, 3)


def search_backends(matrix: np.ndarray, seed: int = 0) -> dict[str, float]:
    """Milliseconds per query for top-10 and for a 20k-id restricted similarity."""
    rng = np.random.default_rng(seed)
    query = matrix[rng.integers(0, len(matrix))]
    ids = rng.integers(0, len(matrix), min(20_000, len(matrix)))
    out = {
        "numpy_top10_ms": _best(lambda: np.argpartition(-(matrix @ query), 10)[:10]),
        "numpy_gather_20k_ms": _best(lambda: matrix[ids] @ query),
    }
    try:
        import faiss

        start = time.perf_counter()
        flat = faiss.IndexFlatIP(matrix.shape[1])
        flat.add(matrix)
        out["faiss_flat_build_s"] = round(time.perf_counter() - start, 3)
        out["faiss_flat_top10_ms"] = _best(lambda: flat.search(query[None, :], 10))
    except ImportError:
        pass
    try:
        from usearch.index import Index

        start = time.perf_counter()
        hnsw = Index(ndim=matrix.shape[1], metric="ip", dtype="f32")
        hnsw.add(np.arange(len(matrix)), matrix)
        out["usearch_hnsw_build_s"] = round(time.perf_counter() - start, 3)
        out["usearch_hnsw_top10_ms"] = _best(lambda: hnsw.search(query, 10))
    except ImportError:
        pass
    return out


def bench(store_uri: str) -> dict:
    import torch

    from benchmarks.report import machine
    from engine.methods.fidelis.index import EmbeddingIndex, make_encoder
    from engine.open import open_store

    name, encode = make_encoder(None)
    with open_store(store_uri) as store, tempfile.TemporaryDirectory() as tmp:
        index = EmbeddingIndex.build(store, name, encode, progress=False)
        directory = index.save(Path(tmp) / "index")
        size = sum(f.stat().st_size for f in directory.iterdir())
    info = index.info
    return {
        "store": store_uri,
        "encoder": info.encoder,
        "relations": info.relations,
        "entities": info.entities,
        "build_seconds": info.seconds,
        "items_per_second": round((info.relations + info.entities) / info.seconds, 1),
        "index_bytes": size,
        "torch_threads": torch.get_num_threads(),
        **search_backends(index.matrix["entities"]),
        "machine": machine(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", action="append", required=True, help="a loaded store (repeatable)")
    args = p.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    for uri in args.store:
        result = bench(uri)
        (RESULTS / f"{Path(uri.split(':', 1)[-1]).name}.json").write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
