"""``kgqa fidelis index``, ``kgqa fidelis search`` and ``kgqa fidelis run``."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.cli.common import (
    add_output_arguments,
    add_run_arguments,
    add_store_arguments,
    open_from_args,
)
from engine.errors import InvalidInputError
from engine.identifiers import positive_int

INDEX_HELP = "index directory (default: <store directory>.fidelis-index beside an embedded store; required for servers)"
ENCODER_HELP = "sentence encoder: local path or model id (default: the offline all-MiniLM-L6-v2)"


def register(sub: argparse._SubParsersAction) -> None:
    fidelis = sub.add_parser("fidelis", help="FiDeLiS: Path-RAG over an embedding index, deductive-verification beam search")
    commands = fidelis.add_subparsers(dest="fidelis_command", required=True, metavar="COMMAND")

    p = commands.add_parser("index", help="embed every relation and entity of a store into an on-disk index")
    p.add_argument("--index", default=None, help=INDEX_HELP)
    p.add_argument("--encoder", default=None, help=ENCODER_HELP)
    p.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    p.add_argument("--force", action="store_true", help="rebuild even when the index is up to date")
    p.add_argument("--no-progress", action="store_true")
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_index)

    p = commands.add_parser("search", help="the relations and entities of the index most similar to a text")
    p.add_argument("text")
    p.add_argument("-m", type=int, default=10, help="how many of each (default 10)")
    p.add_argument("--index", default=None, help=INDEX_HELP)
    p.add_argument("--encoder", default=None, help=ENCODER_HELP)
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_search)

    p = commands.add_parser("run", help="answer a question set and write predictions JSONL")
    add_run_arguments(p, "fidelis", build_method)
    p.add_argument("--prompt-template", default=None, help="chat (tokenizer's), raw, llama2 or a string with {prompt}")
    p.add_argument("--index", default=None, help=INDEX_HELP + "; built when missing, refused when stale")
    p.add_argument("--encoder", default=None, help=ENCODER_HELP)
    p.add_argument("--rebuild-index", action="store_true", help="rebuild a stale index instead of refusing it")
    p.add_argument("--width", type=int, default=3, help="beam width K (default 3, as the authors' code; the paper uses 4)")
    p.add_argument("--depth", type=int, default=3, help="beam depth D (default 3)")
    p.add_argument("--top-n", type=int, default=30, help="Path-RAG candidates kept per beam (default 30)")
    p.add_argument("--alpha", type=float, default=0.3, help="lookahead weight of Eq. 3 (default 0.3)")
    p.add_argument("--verifier", choices=["deductive", "adequacy"], default="deductive",
                   help="deductive: F.2 with the declarative statement (default); adequacy: F.3")
    p.add_argument("--mode", choices=["llm", "paths"], default="llm",
                   help="llm: answer with F.5 (default); paths: the reasoning paths' ends are the answers")
    p.add_argument("--batch-size", type=int, default=4, help="questions searched in lock step (default 4)")
    for stage, default in (("plan", 256), ("rank", 32), ("verify", 8), ("answer", 64)):
        p.add_argument(f"--{stage}-tokens", type=int, default=default, help=f"most new tokens of a {stage} reply (default {default})")
    p.add_argument("--neighbour-limit", type=int, default=20_000, help="most edges of one batched neighbourhood fetch")
    p.add_argument("--lookahead-limit", type=int, default=200_000, help="most edges of one batched lookahead fetch")


def _index_dir(args: argparse.Namespace, store) -> Path:
    from engine.methods.fidelis.index import default_index_dir

    directory = Path(args.index) if args.index else default_index_dir(store)
    if directory is None:
        raise InvalidInputError(f"the store {store.uri} is not an embedded store on disk: give --index DIR for its FiDeLiS index")
    return directory


def open_index(store, directory: Path, encoder: str | None, device: str | None, *, rebuild: bool, progress: bool):
    """The index of ``store`` at ``directory``: built when missing, rebuilt when stale only if
    ``rebuild``, else refused (:class:`StaleIndexError`)."""
    from engine.methods.fidelis.index import EmbeddingIndex, StaleIndexError, make_encoder

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


def _index(args: argparse.Namespace) -> None:
    from engine.methods.fidelis.index import EmbeddingIndex, StaleIndexError, make_encoder

    with open_from_args(args) as store:
        directory = _index_dir(args, store)
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
    with open_from_args(args) as store:
        index = open_index(store, _index_dir(args, store), args.encoder, None, rebuild=False, progress=True)
        found = {kind: index.search(args.text, kind, args.m) for kind in ("relations", "entities")}
    if args.json:
        print(json.dumps({k: [[key, round(s, 5)] for key, s in v] for k, v in found.items()}, indent=2, ensure_ascii=False))
        return
    for kind, hits in found.items():
        print(f"{kind}:")
        for key, score in hits:
            print(f"  {score:.4f}  {key}")


def build_method(args: argparse.Namespace, store, meter):
    """FiDeLiS as ``kgqa fidelis run`` configures it: the store's index (built when missing,
    refused when stale unless --rebuild-index) and the language model."""
    from engine.methods.fidelis.pipeline import FidelisMethod
    from engine.methods.fidelis.search import SearchConfig
    from engine.models.lm import load_lm
    from engine.methods.run import unwrap

    positive_int(args.batch_size, "--batch-size")
    config = SearchConfig(
        width=args.width, depth=args.depth, top_n=args.top_n, alpha=args.alpha, verifier=args.verifier,
        answer_mode=args.mode, neighbour_limit=args.neighbour_limit, lookahead_limit=args.lookahead_limit,
        plan_tokens=args.plan_tokens, rank_tokens=args.rank_tokens, verify_tokens=args.verify_tokens,
        answer_tokens=args.answer_tokens,
    )
    plain = unwrap(store)
    index = open_index(plain, _index_dir(args, plain), args.encoder, args.device,
                       rebuild=args.rebuild_index, progress=not args.no_progress)
    lm = meter.lm(load_lm(args.model, args.device, args.prompt_template, args.dtype))
    return FidelisMethod(store, lm, index, config, meter, batch_size=args.batch_size)
