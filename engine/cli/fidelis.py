"""``kgqa fidelis index`` and ``kgqa fidelis search``."""
from __future__ import annotations

import argparse
import json

from engine.cli.common import add_output_arguments, add_store_arguments, count, open_from_args
from engine.methods.fidelis.config import ENCODER_HELP, INDEX_HELP



def add_commands(commands: argparse._SubParsersAction) -> None:
    """``kgqa fidelis index`` and ``kgqa fidelis search`` (``run`` comes from the method's spec)."""
    p = commands.add_parser("index", help="embed every relation and entity of a store into an on-disk index")
    p.add_argument("--index", default=None, help=INDEX_HELP)
    p.add_argument("--encoder", default=None, help=ENCODER_HELP)
    p.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    p.add_argument("--force", action="store_true", help="rebuild even when the index is up to date")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_index)

    p = commands.add_parser("search", help="the relations and entities of the index most similar to a text")
    p.add_argument("text", help="the text to embed and look up")
    p.add_argument("-m", type=count, default=10, help="how many of each (default 10)")
    p.add_argument("--index", default=None, help=INDEX_HELP)
    p.add_argument("--encoder", default=None, help=ENCODER_HELP)
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_search)


def _index(args: argparse.Namespace) -> None:
    from engine.methods.fidelis.index import EmbeddingIndex, StaleIndexError, index_dir, make_encoder

    with open_from_args(args) as store:
        directory = index_dir(store, args.index)
        name, encode = make_encoder(args.encoder, args.device)
        if (directory / "meta.json").is_file() and not args.force:
            try:
                EmbeddingIndex.load(directory).check(store, name)
                print(f"the index at {directory} is up to date with {store.uri} (--force to rebuild)")
                return
            except StaleIndexError:
                pass
        index = EmbeddingIndex.build(store, name, encode, progress=not args.no_progress)
        index.save(directory)
    size = sum(f.stat().st_size for f in directory.iterdir())
    info = index.info
    report = {
        "index": str(directory), "store": info.store, "encoder": info.encoder, "relations": info.relations,
        "entities": info.entities, "dim": info.dim, "seconds": info.seconds,
        "items_per_second": round((info.relations + info.entities) / info.seconds, 1) if info.seconds else None,
        "bytes": size,
    }
    print(json.dumps(report, indent=2) if args.json else
          f"indexed {info.relations:,} relations and {info.entities:,} entities of {info.store} in {info.seconds:.1f} s "
          f"({report['items_per_second']:,} items/s) into {directory} ({size / 2**20:.1f} MiB)")


def _search(args: argparse.Namespace) -> None:
    from engine.methods.fidelis.index import check_search_text, index_dir, open_index

    check_search_text(args.text)  # before the index and its encoder load
    with open_from_args(args) as store:
        index = open_index(store, index_dir(store, args.index), args.encoder, None, rebuild=False, progress=True)
        found = {kind: index.search(args.text, kind, args.m) for kind in ("relations", "entities")}
    if args.json:
        print(json.dumps({k: [[key, round(s, 5)] for key, s in v] for k, v in found.items()}, indent=2, ensure_ascii=False))
        return
    for kind, hits in found.items():
        print(f"{kind}:")
        for key, score in hits:
            print(f"  {score:.4f}  {key}")
