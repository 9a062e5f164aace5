"""FiDeLiS's options (light: the package lists it without importing torch)."""
from __future__ import annotations

from dataclasses import dataclass
from engine.methods.spec import check_options, option

#: Path-RAG's lookahead weight (Eq. 3) and the candidates kept per beam, as the authors' code
ALPHA = 0.3
TOP_N = 30
INDEX_HELP = "index directory (default: <store directory>.fidelis-index beside an embedded store; required for servers)"
ENCODER_HELP = "sentence encoder: local path or model id (default: the offline all-MiniLM-L6-v2)"


@dataclass(frozen=True)
class FidelisConfig:
    """Every option of ``kgqa fidelis run``, with their defaults (listed on docs/methods/fidelis.md)."""

    model: str | None = option(None, "language model: HF id, local directory, .gguf, or openai:MODEL[@URL] (default: "
                               "the offline SmolLM2-135M-Instruct)")
    prompt_template: str | None = option(None, "chat (tokenizer's), raw, llama2 or a string with {prompt}")
    index: str | None = option(None, INDEX_HELP + "; built when missing, refused when stale")
    encoder: str | None = option(None, ENCODER_HELP)
    rebuild_index: bool = option(False, "rebuild a stale index instead of refusing it")
    width: int = option(3, "beam width K (3, as the authors' code; the paper uses 4)")
    depth: int = option(3, "beam depth D")
    top_n: int = option(TOP_N, "Path-RAG candidates kept per beam")
    alpha: float = option(ALPHA, "lookahead weight of Eq. 3", least=0.0)
    verifier: str = option("deductive", "deductive: F.2 with the declarative statement; adequacy: F.3",
                           choices=("deductive", "adequacy"))
    answer_mode: str = option("llm", "llm: answer with F.5; paths: the reasoning paths' ends are the answers",
                              flag="--mode", choices=("llm", "paths"))
    batch_size: int = option(4, "questions searched in lock step")
    plan_tokens: int = option(256, "most new tokens of a plan reply")
    rank_tokens: int = option(32, "most new tokens of a rank reply")
    verify_tokens: int = option(8, "most new tokens of a verify reply")
    answer_tokens: int = option(64, "most new tokens of an answer reply")
    neighbour_limit: int | None = option(20_000, "most edges of one batched neighbourhood fetch")
    lookahead_limit: int | None = option(200_000, "most edges of one batched lookahead fetch")

    def __post_init__(self) -> None:
        check_options(self)
