"""``kgqa demo``: load the shipped Freebase-shaped sample into the embedded store and run every
operation on it, printing readable results."""
from __future__ import annotations

from importlib import resources

from engine.errors import InvalidInputError
from engine.open import open_store
from engine.render import render
from engine.store import Store

SAMPLE = "sample_freebase.nt"


def sample_path() -> str:
    return str(resources.files("engine") / "data" / SAMPLE)


def _refuse_other_data(store: Store) -> None:
    """The demo loads its sample only into an empty store or an earlier demo's: one whose
    triples and relations count as the sample's do."""
    held = store.count_triples()
    if held == 0:
        return
    from loaders.load import load_files

    with open_store("memory:") as sample:
        load_files(sample, [sample_path()], "ntriples", progress=False)
        if held == sample.count_triples() and store.stats().relations == sample.stats().relations:
            return
    raise InvalidInputError(
        f"the store {store.uri} holds other data ({held:,} triple{'s' * (held != 1)}, not the demo's sample): the demo "
        "adds its sample only to a new folder or an earlier demo's store; give --store a new folder (default kgqa-data/demo)"
    )


def run_demo(store_uri: str = "kgqa-data/demo") -> None:
    from loaders.load import load_files

    def show(title: str, result: object, names: dict | None = None) -> None:
        print(f"\n== {title}")
        print(render(result, names))

    with open_store(store_uri) as store:
        _refuse_other_data(store)
        report = load_files(store, [sample_path()], "ntriples", progress=False)
        print(
            f"Loaded {sample_path()} into {store.uri}: read {report.read}, new {report.loaded}, "
            f"already there {report.duplicates}, rejected {report.rejected}."
        )
        show("stats", store.stats())
        hits = store.search("blade", mode="prefix")
        show('search("blade", prefix)', hits)
        film = hits.hits[0].id
        names = store.names([f"m.0kq{n:02d}" for n in range(1, 100)])
        names = {k: v for k, v in names.items() if v}
        show(f"names([{film}])", store.names([film]))
        show(f"types([{film}, m.0kq90])", store.types([film, "m.0kq90"]))
        show(f"relations([{film}])", store.relations([film]), names)
        show(f"expand([{film}], film.film.directed_by)", store.expand([film], ["film.film.directed_by"]), names)
        show(
            "follow_paths([Harrison Ford], performance.actor ← film.starring ←) — through CVT nodes",
            store.follow_paths(["m.0kq20"], ["film.performance.actor", "film.film.starring"], direction="in"),
            names,
        )
        show(
            "follow_paths([Ridley Scott], directed_by, genre) — either direction",
            store.follow_paths(["m.0kq10"], ["film.film.directed_by", "film.film.genre"]),
            names,
        )
        show("subgraph([Blade Runner], hops=1)", store.subgraph([film], 1), names)
        show(
            "shortest_paths(Harrison Ford, Blade Runner)",
            store.shortest_paths(["m.0kq20"], [film], max_hops=3),
            names,
        )
        show(
            f"two_hop_relations([{film}], film.film.starring) — what lies behind the CVT",
            store.two_hop_relations([film], "film.film.starring", direction="out"),
            names,
        )
        show(
            "query: films released before 1980 (raw SPARQL; dates are xsd:date or xsd:gYear)",
            store.query(
                "SELECT ?film ?date WHERE { ?film <http://rdf.freebase.com/ns/film.film.initial_release_date> ?date . "
                'FILTER(STR(?date) < "1980") } ORDER BY ?date'
            ),
        )
