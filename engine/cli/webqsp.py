"""``kgqa webqsp``: ``build``, the WebQSP slice over FB15k-237 (:mod:`loaders.webqsp_slice`), and
``convert``, every WebQSP parse as an S-expression with a coverage report (:mod:`engine.sexpr.webqsp`)."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
from pathlib import Path

from engine.cli.common import add_output_arguments, add_store_arguments, open_from_args
from engine.errors import InvalidInputError
from engine.outputs import refuse_input_as_output, written_whole
from engine.results import to_json

#: the store the KB goes into unless --store names another
DEFAULT_KB_STORE = os.path.join("kgqa-data", "fb15k237")
#: the invalid parses `convert` lists in its text report (--json lists all)
SHOWN_INVALID = 10


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("webqsp", help="WebQSP questions over FB15k-237")
    actions = p.add_subparsers(dest="webqsp_command", required=True, metavar="COMMAND")
    b = actions.add_parser(
        "build",
        help="build the slice of WebQSP whose gold logical forms reach a gold answer in FB15k-237",
        description="Build the WebQSP slice over FB15k-237: questions.jsonl (the dataset webqsp-fb15k237, or "
        "webqsp-fb15k237-test from WebQSP.test.json), chains.jsonl (the questions left out for a topic entity the "
        "KB lacks whose gold chain has one form on the KB: the dataset webqsp-fb15k237-chains, training questions "
        "for a planner), report.json and report.txt. The KB is loaded into the store first when the store is empty.",
    )
    b.add_argument("--webqsp", required=True, help="WebQSP.train.json or WebQSP.test.json (.gz allowed)")
    b.add_argument("--kb", default=None, help="FB15k-237 directory: train/valid/test.txt(.gz) and entity2text (default: fb15k237 in the data directory)")
    b.add_argument("--ontology", default=None, help="GrailQA ontology folder with reverse_properties (default: freebase-ontology in the data directory)")
    b.add_argument("--data-dir", default=None, help="data directory (default: $KGQA_DATA, else shared/data beside the checkout)")
    b.add_argument(
        "--out", default=None,
        help="output directory (default: webqsp-fb15k237 or webqsp-fb15k237-test, after the WebQSP file's name, "
        "in $KGQA_BUILT or kgqa-data/datasets, where --dataset finds them)",
    )
    b.add_argument("--strict-constraints", action="store_true", help="drop a question that loses any constraint, instead of keeping it without")
    b.add_argument("--summary", default=None, metavar="FILE",
                   help="also write the build's counts, without paths or timings, to this JSON file (the docs' numbers "
                   "are those of results/datasets/, written so)")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_store_arguments(b, default=DEFAULT_KB_STORE)
    add_output_arguments(b)
    b.set_defaults(handler=_run_build)
    c = actions.add_parser(
        "convert",
        help="write every WebQSP parse as an S-expression and report the coverage",
        description="Convert the parses of a WebQSP file to S-expressions (GrailQA logical forms): one JSON line "
        '{"ParseId": …, "sexpr": …} per parse converted into --out, and the coverage report (parses and questions '
        "converted, the shapes left uncovered) on the standard output.",
    )
    c.add_argument("--webqsp", required=True, help="WebQSP.train.json or WebQSP.test.json (.gz allowed)")
    c.add_argument("--out", required=True, help="the JSONL file to write")
    add_output_arguments(c)
    c.set_defaults(handler=_run_convert)


def default_out(webqsp: str) -> Path:
    """The build directory the dataset resolver reads for this WebQSP file (by its name)."""
    from loaders.datasets import BUILT_DATASETS, built_dir

    name = Path(webqsp).name.lower()
    split = "webqsp-fb15k237-test" if "test" in name else "webqsp-fb15k237" if "train" in name else None
    if split is None:
        raise InvalidInputError(f"cannot tell train from test by the name {Path(webqsp).name!r}: give --out DIR")
    return built_dir() / Path(BUILT_DATASETS[split][0]).parent


def _run_build(args: argparse.Namespace) -> None:
    from loaders.datasets import data_dir
    from loaders.webqsp_slice import build_from_files, check_webqsp_file, format_report, summary

    check_webqsp_file(args.webqsp)  # before the store is opened (or made) and the name read
    out = Path(args.out) if args.out else default_out(args.webqsp)
    if args.summary:
        refuse_input_as_output(args.summary, [args.webqsp], what="the summary file", option="--summary")
    # entered before the build: a --summary that is a folder is refused at once, and a failed build leaves the old file
    summary_file = written_whole(args.summary) if args.summary else contextlib.nullcontext()
    with summary_file as summary_path, open_from_args(args, write=True) as store:  # it loads the KB when the store lacks it
        report = build_from_files(
            args.webqsp,
            args.kb or data_dir(args.data_dir) / "fb15k237",
            store,
            out,
            ontology=args.ontology or data_dir(args.data_dir) / "freebase-ontology",
            strict_constraints=args.strict_constraints,
            progress=not args.no_progress,
        )
        if summary_path:
            summary_path.write_text(json.dumps(summary(report), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(to_json(report), indent=2, ensure_ascii=False))
    else:
        print(format_report(report))
        print(f"\nwritten to {out}/ (questions.jsonl, chains.jsonl, report.json, report.txt)"
              + (f"; the counts to {args.summary}" if args.summary else ""))


def _run_convert(args: argparse.Namespace) -> None:
    from engine.sexpr.webqsp import convert_all, read_questions

    refuse_input_as_output(args.out, [args.webqsp], what="the output file", option="--out")
    pairs, coverage = convert_all(read_questions(args.webqsp))
    with written_whole(args.out) as partial, partial.open("w", encoding="utf-8") as f:
        f.writelines(json.dumps({"ParseId": parse_id, "sexpr": sexpr}, ensure_ascii=False) + "\n" for parse_id, sexpr in pairs)
    report = coverage.to_json()
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return
    print(
        f"{report['converted']:,} of {report['parses']:,} parses converted ({report['parse_coverage']:.1%}); "
        f"{report['questions_converted']:,} of {report['questions']:,} questions have one"
    )
    if report["uncovered_shapes"]:
        print("uncovered shapes (parses):")
        for shape, count in report["uncovered_shapes"].items():
            print(f"  {count:6,}  {shape}")
    if report["invalid_parses"]:
        print("invalid parses (not converted):")
        for line in report["invalid_parses"][:SHOWN_INVALID]:
            print(f"  {line}")
        if len(report["invalid_parses"]) > SHOWN_INVALID:
            print(f"  … and {len(report['invalid_parses']) - SHOWN_INVALID:,} more (--json lists them all)")
    print(f"written to {args.out}")
