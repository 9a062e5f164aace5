"""ARG-KBQA: two-hop retrieval with a two-stage ranker, logical-form candidates and references,
few-shot generation, alignment and execution (``methods/ARG-KBQA.md``)."""
from engine.methods.arg.pipeline import ArgConfig, build, training_samples
from engine.methods.spec import MethodSpec

SPEC = MethodSpec(
    name="arg",
    help="ARG-KBQA: two-hop retrieval with a two-stage ranker, generated S-expressions executed in the store",
    config=ArgConfig,
    build=build,
    training_samples=training_samples,
    paper="Tian et al., ARG-KBQA: Augmenting Reasoning Graphs for Knowledge Base Question Answering",
)
