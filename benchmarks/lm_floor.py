"""The language model's floor on this machine: seconds to read a prompt, and per new token.

    python -m benchmarks.lm_floor --tokens 500,1000,2000,4000

For each prompt length and precision, the offline SmolLM2-135M (or ``--model``) reads a prompt
of that many tokens (one forward pass, as ``generate`` runs it: the time to its first token)
and then decodes ``--new`` more tokens, timed apart, greedily and without stopping, as the
engine decodes one prompt (``TransformersLM.decoding_cache``: in bfloat16 on a CPU, the float32
cache of ``engine/models/float32_cache.py``); ``--compare-own`` adds, for 16-bit precisions, the same
with transformers' own cache. The prompt is seeded random token ids: the cost of a forward pass
does not depend on which tokens it reads. Best of ``--repeat``.

This is what a method whose questions carry long prompts cannot go under on one machine: RoG's
reasoning prompt, filled with paths up to 4,096 tokens, is read once per question.

Results go to ``benchmarks/results/lm-floor/lm-floor.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "lm-floor"


def timed_generate(lm: Any, ids: Any, new: int, own_cache: bool) -> float:
    """Seconds for ``generate`` to read ``ids`` and produce exactly ``new`` tokens."""
    import torch

    cache = {} if own_cache else lm.decoding_cache(False, ids.shape[1], new)
    started = time.perf_counter()
    with torch.no_grad():
        lm.model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new, min_new_tokens=new,
            pad_token_id=lm.eos_token_id, **cache,
        )
    return time.perf_counter() - started


def measure(lm: Any, tokens: int, new: int, repeat: int, own_cache: bool) -> dict[str, float]:
    import torch

    generator = torch.Generator().manual_seed(tokens)
    ids = torch.randint(0, len(lm.tokenizer), (1, tokens), generator=generator)
    read = min(timed_generate(lm, ids, 1, own_cache) for _ in range(repeat))
    both = min(timed_generate(lm, ids, 1 + new, own_cache) for _ in range(repeat))
    return {"read_seconds": round(read, 3), "per_new_token_ms": round((both - read) / new * 1000, 1)}


def markdown(result: dict[str, Any]) -> str:
    from benchmarks.report import machine_markdown

    lines = [
        "# The language model's floor: reading a prompt, and each new token",
        "",
        (f"Finished {result['finished']} in {result['seconds']} s. {machine_markdown(result['machine'])}. "
         f"`OMP_NUM_THREADS={result['omp_threads']}`, model {result['model']}, best of {result['repeat']}."),
        "",
        "| precision | cache | prompt tokens | read the prompt, s | per new token at that context, ms |",
        "|---|---|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(f"| {r['dtype']} | {r['cache']} | {r['tokens']:,} | {r['read_seconds']:.2f} | {r['per_new_token_ms']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", default="500,1000,2000,4000", help="prompt lengths, comma-separated")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--new", type=int, default=32, help="new tokens timed after the prompt")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--model", default=None, help="a local model (default: the offline SmolLM2-135M)")
    p.add_argument("--compare-own", action="store_true", help="16-bit precisions also with transformers' own cache")
    p.add_argument("--out", default=str(RESULTS))
    args = p.parse_args(argv)
    from benchmarks.report import machine
    from engine.models.loading import local_source
    from engine.models.transformers_lm import TransformersLM

    started, rows = time.perf_counter(), []
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    for dtype in args.dtypes.split(","):
        lm = TransformersLM.load(local_source(args.model), "cpu", None, dtype)
        # the engine decodes with transformers' own cache unless it switched to the float32 one
        caches = [("engine" if lm.float32_decoding else "transformers", False)]
        if args.compare_own and lm.float32_decoding:
            caches.append(("transformers", True))
        for name, own in caches:
            for tokens in (int(t) for t in args.tokens.split(",")):
                rows.append({"dtype": dtype, "cache": name, "tokens": tokens,
                             **measure(lm, tokens, args.new, args.repeat, own)})
                print(json.dumps(rows[-1]), flush=True)
    result = {"model": args.model or "SmolLM2-135M-Instruct (offline default)", "repeat": args.repeat, "new": args.new,
              "omp_threads": os.environ.get("OMP_NUM_THREADS"), "machine": {**machine(), "load_average_start": load_at_start},
              "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "seconds": round(time.perf_counter() - started, 1), "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "lm-floor.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "lm-floor.md").write_text(markdown(result))
    print(out / "lm-floor.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
