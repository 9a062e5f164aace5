"""EtD: the layer's equations against a naive per-edge loop, top-K pruning, backtracking, the
prompt, label parsing, the batched expansion on every store against the reference, and a tiny
end-to-end training run through the CLI."""
from __future__ import annotations

import json
import random
import re

import pytest
import torch

from engine.cli.main import main
from engine.errors import InvalidInputError
from engine.methods.etd.determination import _labelled, _opening, answer_settled, parse_choice
from engine.methods.etd.evidence import Fact, backtrack, facts
from engine.methods.etd.exploration import KEY_STRIDE, Explorer, RelationVocab
from engine.methods.etd.layers import EtDLayer, LayerOutput, top_k_per_head
from engine.methods.etd.model import (
    EtDConfig,
    EtDModel,
    Exploration,
    answer_loss,
    segment_log_softmax,
)
from engine.methods.etd.config import EtdConfig
from engine.methods.etd.pipeline import EtdMethod
from engine.methods.etd.prompts import TASK_DESCRIPTION, Option, render_prompt
from engine.methods.etd.training import TOPIC_PLACEHOLDER, load_checkpoint, question_texts
from engine.graph import Literal, Triple
from engine.models.lm import Generation
from engine.open import open_store
from engine.reference import ReferenceStore
from engine.methods.meter import Meter
from engine.methods.run import run_method
from engine.methods.spec import Models
from loaders.questions import Question, read_metaqa_questions

# ------------------------------------------------------------------ the layer (Eq. 1–2)
DIM = 6


def _hand_built_graph():
    """Two questions; frontier nodes 0, 1 (question 0) and 2 (question 1); 3 relation ids."""
    torch.manual_seed(0)
    h = torch.randn(3, DIM)
    h_q = torch.randn(2, DIM)
    h_rel = torch.randn(3, DIM)
    node_question = torch.tensor([0, 0, 1])
    edges = [(0, 0, 10), (0, 1, 11), (0, 2, 12), (0, 0, 13), (1, 1, 10), (1, 2, 14), (2, 0, KEY_STRIDE + 10), (2, 2, KEY_STRIDE + 15)]
    src, rel, dst = (torch.tensor(col) for col in zip(*edges))
    return h, h_q, h_rel, node_question, src, rel, dst


def _naive_layer(layer: EtDLayer, h, h_q, h_rel, node_question, src, rel, dst):
    w_s, w_r, w_q, w_qr = layer.att.detach()
    alphas = []
    for s, r in zip(src.tolist(), rel.tolist()):
        q = int(node_question[s])
        logit = w_s @ h[s] + w_r @ h_rel[r] + w_q @ h_q[q] + w_qr @ (h_rel[r] * h_q[q])
        alphas.append(torch.sigmoid(logit))
    kept = []
    for head in sorted(set(src.tolist())):
        mine = [e for e in range(len(alphas)) if int(src[e]) == head]
        kept += sorted(mine, key=lambda e: (-float(alphas[e]), e))[: layer.top_k]
    sums: dict[int, torch.Tensor] = {}
    for e in sorted(kept):
        message = alphas[e] * (layer.lin.weight.detach() @ (h[int(src[e])] * h_rel[int(rel[e])]))
        key = int(dst[e])
        sums[key] = sums.get(key, torch.zeros(DIM)) + message
    nodes = sorted(sums)
    return torch.stack(alphas), sorted(kept), nodes, torch.stack([torch.relu(sums[n]) for n in nodes])


def test_layer_matches_a_naive_per_edge_loop():
    layer = EtDLayer(DIM, top_k=2)
    graph = _hand_built_graph()
    alpha, kept, nodes, h_out = _naive_layer(layer, *graph)
    with torch.no_grad():
        assert torch.allclose(layer.attention(*graph[:6]), alpha, atol=1e-6)
        out = layer(*graph)
    src, rel, dst = graph[4:]
    assert out.nodes.tolist() == nodes
    assert sorted(zip(out.src.tolist(), out.rel.tolist(), out.nodes[out.dst].tolist())) == sorted(
        (int(src[e]), int(rel[e]), int(dst[e])) for e in kept
    )
    assert torch.allclose(out.alpha, alpha[kept], atol=1e-6)
    assert torch.allclose(out.h, h_out, atol=1e-5)


def test_a_training_step_gives_the_same_gradients_every_time_on_two_threads():
    """Gathers whose backward adds repeated rows with atomic adds on a multi-threaded CPU
    (``x[index]``) make every training run differ; the model's gathers must not."""
    rng = random.Random(0)
    relations = [f"r{i}" for i in range(8)]
    triples = [Triple(f"t{q}", rng.choice(relations), f"n{rng.randrange(3000)}") for q in range(20) for _ in range(200)]
    triples += [Triple(f"n{i}", rng.choice(relations), f"n{rng.randrange(3000)}") for i in range(3000) for _ in range(3)]
    explorer = Explorer(ReferenceStore(triples), RelationVocab(relations))
    torch.manual_seed(0)
    model = EtDModel(EtDConfig(2, 50, 256, None, tuple(relations), None), torch.randn(len(relations), 32))
    questions = torch.randn(20, 32)
    topics = [explorer.nodes([f"t{q}"]) for q in range(20)]
    gold = [explorer.nodes([triples[q * 200].object]) for q in range(20)]

    def gradients() -> list[torch.Tensor]:
        model.zero_grad()
        answer_loss(model(questions, topics, explorer), gold)[0].backward()
        return [p.grad.clone() for p in model.parameters()]

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        first = gradients()
        for _ in range(4):
            assert all(torch.equal(a, b) for a, b in zip(first, gradients()))
    finally:
        torch.set_num_threads(threads)


def test_layer_repr_parameters_and_gradients():
    layer = EtDLayer(DIM, top_k=5)
    assert repr(layer) == "EtDLayer(6, top_k=5)"
    with pytest.raises(ValueError):
        EtDLayer(DIM, top_k=0)
    out = layer(*_hand_built_graph())
    out.h.sum().backward()
    assert layer.att.grad is not None and layer.lin.weight.grad is not None


def test_top_k_per_head_keeps_the_largest_and_breaks_ties_by_order():
    alpha = torch.tensor([0.1, 0.9, 0.5, 0.5, 0.2, 0.7, 0.3])
    src = torch.tensor([0, 0, 0, 0, 1, 1, 2])
    assert top_k_per_head(alpha, src, 3, 2).tolist() == [1, 2, 4, 5, 6]
    assert top_k_per_head(alpha, src, 3, 1).tolist() == [1, 5, 6]


def test_segment_log_softmax_and_loss_with_several_gold_answers():
    logits = torch.tensor([1.0, 2.0, 3.0, 0.5, 0.5])
    segment = torch.tensor([0, 0, 0, 1, 1])
    log_p = segment_log_softmax(logits, segment, 2)
    assert torch.allclose(log_p[:3], torch.log_softmax(logits[:3], 0))
    assert torch.allclose(log_p[3:], torch.log(torch.tensor([0.5, 0.5])))
    keys = torch.tensor([5, 6, 7, KEY_STRIDE + 5, KEY_STRIDE + 8])
    exploration = Exploration(keys, log_p, torch.tensor([5, KEY_STRIDE + 5]), [])
    loss, unreached = answer_loss(exploration, [[6, 7], [99]])
    assert unreached == 1
    assert torch.allclose(loss, -(log_p[1] + log_p[2]) / 2)


def test_frontier_cap_keeps_each_questions_best_tails_and_their_edges():
    graph = _hand_built_graph()
    h, _, h_rel, _, src, rel, dst = graph
    uncapped = EtDLayer(DIM, top_k=2)
    capped = EtDLayer(DIM, top_k=2, max_nodes=2)
    capped.load_state_dict(uncapped.state_dict())
    assert repr(capped) == "EtDLayer(6, top_k=2, max_nodes=2)"
    with pytest.raises(ValueError):
        EtDLayer(DIM, top_k=2, max_nodes=0)
    with torch.no_grad():
        alpha = uncapped.attention(*graph[:6])
        full = uncapped(*graph)
        out = capped(*graph)
    # the paper's per-head top-2: question 0 keeps 4 edges into 4 distinct tails, question 1 two
    kept_tails = full.nodes.tolist()
    assert len([n for n in kept_tails if n < KEY_STRIDE]) > 2
    best: dict[int, float] = {}
    for e in top_k_per_head(alpha, src, 3, 2).tolist():
        best[int(dst[e])] = max(best.get(int(dst[e]), 0.0), float(alpha[e]))
    expected = []
    for q in (0, 1):
        mine = sorted((n for n in best if n // KEY_STRIDE == q), key=lambda n: (-best[n], n))
        expected += mine[:2]
    assert out.nodes.tolist() == sorted(expected)
    # the kept edges are exactly the per-head top-2 edges into the surviving tails
    survivors = set(expected)
    wanted = [e for e in top_k_per_head(alpha, src, 3, 2).tolist() if int(dst[e]) in survivors]
    assert sorted(zip(out.src.tolist(), out.rel.tolist(), out.nodes[out.dst].tolist())) == sorted(
        (int(src[e]), int(rel[e]), int(dst[e])) for e in wanted
    )
    # and the representations are Eq. 2 over those edges only
    messages = alpha[wanted].unsqueeze(1) * (capped.lin.weight.detach() @ (h[src[wanted]] * h_rel[rel[wanted]]).T).T
    index = torch.tensor([sorted(expected).index(int(dst[e])) for e in wanted])
    assert torch.allclose(out.h, torch.relu(torch.zeros(len(expected), DIM).index_add_(0, index, messages)), atol=1e-5)
    # a cap at least as large as every question's tails changes nothing
    loose = EtDLayer(DIM, top_k=2, max_nodes=10)
    loose.load_state_dict(uncapped.state_dict())
    with torch.no_grad():
        same = loose(*graph)
    assert same.nodes.tolist() == full.nodes.tolist() and torch.equal(same.h, full.h)
    # the cap is for training steps only: in eval mode the capped layer explores as the paper
    capped.eval()
    with torch.no_grad():
        evaluated = capped(*graph)
    assert evaluated.nodes.tolist() == full.nodes.tolist() and torch.equal(evaluated.h, full.h)


class _RecordingStore(ReferenceStore):
    """A reference store that remembers the ids of every ``expand`` call."""

    def __init__(self, triples) -> None:
        super().__init__(triples)
        self.expanded: list[list[str]] = []

    def expand(self, ids, *args, **kwargs):
        self.expanded.append(sorted(ids))
        return super().expand(ids, *args, **kwargs)


def _fan_graph() -> list[Triple]:
    """topic -r0-> a0..a5; each a_i -r1-> b_i0..b_i2 (so 2-hop frontiers could reach 24 nodes)."""
    triples = [Triple("topic", "r0", f"a{i}") for i in range(6)]
    triples += [Triple(f"a{i}", "r1", f"b{i}{j}") for i in range(6) for j in range(3)]
    return triples


@pytest.mark.parametrize("max_frontier", [None, 2])
def test_pruning_bounds_the_next_frontier_through_the_store(max_frontier):
    store = _RecordingStore(_fan_graph())
    explorer = Explorer(store, RelationVocab(["r0", "r1"]))
    frontiers: list[list[str]] = []
    expand = explorer.expand

    def recording_expand(frontier):
        frontiers.append(sorted(str(explorer.terms[n]) for n in frontier))
        return expand(frontier)

    explorer.expand = recording_expand
    torch.manual_seed(1)
    top_k = 3
    model = EtDModel(EtDConfig(3, top_k, 8, None, ("r0", "r1"), max_frontier), torch.randn(2, 5))
    with torch.no_grad():
        exploration = model(torch.randn(1, 5), [explorer.nodes(["topic"])], explorer)
    assert frontiers[0] == ["topic"] and store.expanded[0] == ["topic"]
    assert len(store.expanded) <= 3  # at most one store call per layer (cached nodes are not asked again)
    kept_so_far: set[str] = {"topic"}
    for layer, out in enumerate(exploration.layers):
        kept = sorted(str(explorer.terms[int(n)]) for n in out.nodes)
        assert len(kept) <= len(frontiers[layer]) * top_k  # per-head top-K bounds the kept tails
        if max_frontier is not None:
            assert len(kept) <= max_frontier
        if layer + 1 < len(frontiers):
            assert frontiers[layer + 1] == kept  # the next layer expands the kept tails, nothing else
        kept_so_far |= set(kept)
    # the store is never asked about a node that pruning dropped: of the six a_i, the topic's
    # top-3 edges (identity included) let at most 3 through, and only their b's can follow
    asked = {i for call in store.expanded for i in call}
    assert asked <= kept_so_far
    layer1 = {str(explorer.terms[int(n)]) for n in exploration.layers[0].nodes}
    assert len(layer1) <= top_k and {a for a in asked if a.startswith("a")} <= layer1
    assert all("a" + b[1] in layer1 for b in asked if b.startswith("b"))


def test_encoding_cache_encodes_each_text_list_once(tmp_path, monkeypatch):
    import engine.methods.etd.model as etd_model

    calls: list[list[str]] = []

    class FakeEncoder:
        def encode(self, texts, **_):
            calls.append(list(texts))
            return torch.tensor([[float(len(t)), 1.0] for t in texts])

    monkeypatch.setattr(etd_model, "load_encoder", lambda name: FakeEncoder())
    first = etd_model.encode_texts(["ab", "cde"], cache_dir=tmp_path)
    again = etd_model.encode_texts(["ab", "cde"], cache_dir=tmp_path)
    other = etd_model.encode_texts(["ab", "cdef"], cache_dir=tmp_path)
    assert calls == [["ab", "cde"], ["ab", "cdef"]]
    assert torch.equal(first, again) and other[1, 0] == 4.0
    assert len(list(tmp_path.glob("encodings-*.pt"))) == 2
    etd_model.encode_texts(["ab", "cde"])  # no cache directory: always encodes
    assert len(calls) == 3


def test_an_encoding_cache_file_cut_short_or_foreign_is_encoded_again_and_never_run(tmp_path, monkeypatch):
    import os

    import engine.methods.etd.model as etd_model

    class FakeEncoder:
        def encode(self, texts, **_):
            return torch.tensor([[float(len(t)), 1.0] for t in texts])

    class Code:  # a pickle that runs a command when it is loaded unsafely
        def __reduce__(self):
            return os.system, (f"touch {tmp_path / 'ran'}",)

    monkeypatch.setattr(etd_model, "load_encoder", lambda name: FakeEncoder())
    first = etd_model.encode_texts(["ab", "cde"], cache_dir=tmp_path)
    [cached] = tmp_path.glob("encodings-*.pt")
    whole = cached.read_bytes()
    for bad in (whole[: len(whole) // 2], b"", None):
        if bad is None:
            torch.save({"x": Code()}, cached)
        else:
            cached.write_bytes(bad)
        assert torch.equal(etd_model.encode_texts(["ab", "cde"], cache_dir=tmp_path), first)
        assert torch.equal(torch.load(cached, weights_only=True), first)  # written whole again
    assert not (tmp_path / "ran").exists() and sorted(p.name for p in tmp_path.iterdir()) == [cached.name]


# ------------------------------------------------------------------ backtracking (Algorithm 2)
def test_backtracking_follows_the_strongest_in_edge_and_writes_facts_in_stored_direction():
    #   topic t(0) --r0--> a(1) --inverse r1--> c(3);  t --r0--> b(2) --r1--> c;  identity t -> t
    vocab = RelationVocab(["r0", "r1"])
    explorer = Explorer(ReferenceStore([]), vocab)
    t, a, b, c = explorer.nodes(["t", "a", "b", "c"])
    layer1 = LayerOutput(
        h=torch.zeros(4, 1), nodes=torch.tensor([t, a, b, c]),
        src=torch.tensor([0, 0, 0]), rel=torch.tensor([vocab.identity, 0, 0]), dst=torch.tensor([0, 1, 2]),
        alpha=torch.tensor([0.3, 0.8, 0.6]),
    )
    layer2 = LayerOutput(
        h=torch.zeros(2, 1), nodes=torch.tensor([t, c]),
        src=torch.tensor([0, 1, 2]), rel=torch.tensor([vocab.identity, 1 + vocab.size, 1]), dst=torch.tensor([0, 1, 1]),
        alpha=torch.tensor([0.5, 0.4, 0.9]),
    )
    exploration = Exploration(torch.tensor([t, a, b, c]), torch.zeros(4), torch.tensor([t]), [layer1, layer2])
    assert backtrack(exploration, c) == [(t, 0, b), (b, 1, c)]
    assert backtrack(exploration, t) == [(t, vocab.identity, t), (t, vocab.identity, t)]
    assert backtrack(exploration, a) == [(t, 0, a)]  # kept by layer 1 only
    layer2.alpha[1] = 0.95
    assert facts(backtrack(exploration, c), explorer) == [Fact("t", "r0", "a"), Fact("c", "r1", "a")]
    assert facts(backtrack(exploration, t), explorer) == []


# ------------------------------------------------------------------ prompt and determination
def test_prompt_renders_the_papers_example_exactly():
    options = [
        Option("1989", 0.9961, (Fact("Birdy", "written_by", "William Wharton"), Fact("Dad", "written_by", "William Wharton"), Fact("Dad", "release_year", "1989"))),
        Option("1998", 0.0039, (Fact("Birdy", "has_tags", "nicolas cage"),)),
        Option("1976", 0.00001, ()),
    ]
    question = "when made the dissemination of the films whose writers also wrote Birdy?"
    assert render_prompt(question, options) == "\n".join([
        TASK_DESCRIPTION,
        f"Question: {question}",
        "Reference answers:",
        (
            "A. 1989 (correct probability: 0.996) {relevant facts: (Birdy, written_by, William Wharton), "
            "(Dad, written_by, William Wharton), (Dad, release_year, 1989)}"
        ),
        "B. 1998 (correct probability: 0.004) {relevant facts: (Birdy, has_tags, nicolas cage)}",
        "C. 1976 (correct probability: 0.0) {relevant facts: }",
    ])
    assert TASK_DESCRIPTION.startswith("Given a question, and the reference answers with their correct probabilities")
    assert TASK_DESCRIPTION.endswith("please answer the question based on your own knowledge.")
    assert render_prompt("q", [Option("x", 0.5, ())], {"x": "X"}).endswith("A. x (correct probability: 0.5) {relevant facts: }")


@pytest.mark.parametrize("output, index, answer", [
    ("Based on the reference answers, the correct answer is B. 1998.", 1, "1998"),
    ("C. 1976", 2, "1976"),
    ("I think it is 1989, as the facts show.", 0, "1989"),
    ("A", 0, "1989"),
    ("Paris\nbecause …", None, "Paris"),
    ("The answer is: C. 1976", 2, "1976"),
    ("The answer is a film of 1998.", 1, "1998"),  # "a" is no label; the option it names is
    # the first line that gives a label decides; what follows it does not
    ("Based on the facts:\nThe correct answer is B. 1998.\nHere's why: A. 1989 is wrong", 1, "1998"),
    ("C. 1976 (correct probability: 0.0)\n\nThe answer is A. 1989", 2, "1976"),
    ("(B) 1998, though the answer is A by the facts", 1, "1998"),  # the label it opens with
    # a label anywhere comes before an option named without one
    ("Question: is it 1998?\nReference answers:\nA. 1989", 0, "1989"),
])
def test_parse_choice(output, index, answer):
    choice = parse_choice(output, ["1989", "1998", "1976"])
    assert (choice.index, choice.answer) == (index, answer)


def test_a_reply_of_many_lines_is_read_as_line_by_line_without_reading_it_once_per_line():
    options = ["1989", "1998", "1976"]
    chatter = "hmm\n" * 500_000
    assert parse_choice(chatter + "The answer is B.\nA. 1989", options).index == 1
    assert parse_choice(chatter, options).answer == "hmm"
    # the first lines that give a label decide, as reading line by line finds them
    fragments = ["hmm", "A. 1989", "the answer is", "C", "(B) 1998", "answer: B", "1976", "B. ", "Z. no", ""]
    rng = random.Random(0)
    for _ in range(500):
        output = "\n".join(rng.choice(fragments) for _ in range(rng.randint(1, 6)))
        lines = output.strip().splitlines()
        by_line = next((found for end in range(1, len(lines) + 1)
                        if (found := _labelled("\n".join(lines[:end]), options, output)) is not None), None)
        if by_line is not None and _opening(output.strip(), options, output) is None:
            assert parse_choice(output, options) == by_line, output


@pytest.mark.parametrize("output, settles", [
    ("The correct answer is B. 1998.\nHere's why: the facts show 1998.\nTherefore, the correct answer is B.", True),
    ("C. 1976 (correct probability: 0.0)\n\nQuestion: when?\nReference answers:\nA. 1989\nB. 1998", True),
    ("Let me think.\nThe answer would be A.\nB. 1998 is older", True),
    ("A. 1989 (correct probability: 0.996) {relevant facts: (Birdy, written_by, William Wharton), (Dad", True),
    ("The film came out in 1998\nor in 1976, I am not sure\nreally", False),  # no label: read to the end
    ("Paris\nbecause …", False),
])
def test_decoding_stops_once_the_answer_is_settled(output, settles):
    """The stop rule holds first at a prefix whose answer is the whole output's, so decoding
    that stops there answers as decoding to the end would."""
    options = ["1989", "1998", "1976"]
    settled = answer_settled(options)
    whole = parse_choice(output, options)
    ends = [end for end in range(1, len(output) + 1) if settled(output[:end].strip())]
    assert bool(ends) == settles
    if ends:
        early = parse_choice(output[: ends[0]], options)
        assert (early.index, early.answer) == (whole.index, whole.answer)
        assert ends[0] < len(output.rstrip())


# ------------------------------------------------------------------ batched expansion, every store
GRAPH = [
    Triple("m1", "directed_by", "d1"),
    Triple("m1", "starred_actors", "a1"),
    Triple("m2", "starred_actors", "a1"),
    Triple("m2", "release_year", "y2000"),
    Triple("a1", "knows", "a1"),
    Triple("m2", "has_rating", Literal.make("7.5")),
    Triple("d1", "type.object.name", Literal.make("Dee", lang="en")),
]


def _edges(explorer: Explorer, frontier: list[int]) -> set[tuple[str, str, str]]:
    got = explorer.expand(frontier)
    return {
        (str(explorer.terms[frontier[s]]), str(r), str(explorer.terms[d]))
        for s, r, d in zip(got.src.tolist(), got.rel.tolist(), got.dst.tolist())
    }


def test_batch_expansion_matches_the_reference_on_every_store(make_store, store_kind):
    store = make_store(store_kind, GRAPH)
    reference = ReferenceStore(GRAPH)
    vocab = RelationVocab.from_store(reference)
    assert vocab.names == ["directed_by", "has_rating", "knows", "release_year", "starred_actors"]
    assert RelationVocab.from_store(store).names == vocab.names
    meter = Meter()
    ours, theirs = Explorer(meter.store(store), vocab), Explorer(reference, vocab)
    frontier = ["a1", "m2", "a1", "d1"]  # a1 twice: a node per question
    got = _edges(ours, ours.nodes(frontier))
    assert got == _edges(theirs, theirs.nodes(frontier))
    assert meter.calls["store"] == 1
    r = vocab.index
    assert ("a1", str(r["starred_actors"] + vocab.size), "m1") in got  # in-edge as inverse id
    assert ("a1", str(r["knows"]), "a1") in got  # stored self-loop met once, forward
    assert ("d1", str(vocab.identity), "d1") in got
    assert ("m2", str(r["has_rating"]), "7.5") in got
    literal = ours.node(Literal.make("7.5"))
    again = _edges(ours, ours.nodes(["m1"]) + [literal])
    assert meter.calls["store"] == 2  # m1 was new; a literal is never expanded
    assert ("7.5", str(vocab.identity), "7.5") in again
    assert [e for e in again if e[0] == "7.5"] == [("7.5", str(vocab.identity), "7.5")]
    _edges(ours, ours.nodes(["m1", "a1"]))
    assert meter.calls["store"] == 2  # served from the cache


def test_hub_degree_cap_samples_the_same_edges_every_time():
    hub = [Triple(f"m{i}", "has_genre", "drama") for i in range(30)]
    vocab = RelationVocab(["has_genre"])
    first, second = Explorer(ReferenceStore(hub), vocab, max_degree=7), Explorer(ReferenceStore(hub), vocab, max_degree=7)
    got = _edges(first, first.nodes(["drama"]))
    assert len(got) == 8 and got == _edges(second, second.nodes(["drama"]))
    assert first.capped_nodes == 1


# ------------------------------------------------------------------ a tiny end-to-end run
def _toy_kb_and_questions(tmp_path):
    kb, questions = [], []
    for i in range(16):
        kb += [f"film{i}|directed_by|director{i % 5}", f"film{i}|has_genre|genre{i % 3}", f"film{i}|release_year|year{i % 4}"]
        questions += [
            f"who directed [film{i}]\tdirector{i % 5}",
            f"what genre is [film{i}]\tgenre{i % 3}",
            f"when was [film{i}] released\tyear{i % 4}",
        ]
    (tmp_path / "kb.txt").write_text("\n".join(kb) + "\n")
    (tmp_path / "qa.txt").write_text("\n".join(questions) + "\n")
    return tmp_path / "kb.txt", tmp_path / "qa.txt"


@pytest.mark.model
def test_training_learns_a_toy_graph_and_predict_writes_jsonl(tmp_path, capsys):
    kb, qa = _toy_kb_and_questions(tmp_path)
    store = str(tmp_path / "store")
    assert main(["load", str(kb), "--format", "metaqa", "--store", store, "--no-progress"]) == 0
    common = ["--dataset", str(qa), "--store", store, "--no-progress"]
    capsys.readouterr()
    code = main(["etd", "train", *common, "--paper-config", "metaqa-1hop", "--checkpoint-dir", str(tmp_path / "ckpt"), "--epochs", "12",
                 "--patience", "12", "--lr", "0.01", "--dim", "32", "--batch-size", "8"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["epoch_loss"][-1] < summary["epoch_loss"][0]
    assert summary["best_val_hits1"] >= 0.8
    assert summary["store_calls"] >= 1 and 0 <= summary["store_share"] <= 1
    assert (tmp_path / "ckpt" / "best.pt").is_file() and (tmp_path / "ckpt" / "summary.json").is_file()
    out = tmp_path / "pred.jsonl"
    code = main(["etd", "run", *common, "--checkpoint", str(tmp_path / "ckpt" / "best.pt"), "--split", "all",
                 "--gnn-only", "--out", str(out), "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["questions"] == 48 and result["hits1"] >= 0.8 and result["calls_per_question"]["llm"] == 0
    assert result["etd"]["hits1_gnn"] == result["hits1"]  # without an LLM the answer is the GNN's
    records = [json.loads(line) for line in out.read_text().splitlines()]
    first = records[0]
    assert set(first) >= {"id", "question", "answers", "prediction", "prediction_ids", "seconds", "calls", "etd"}
    candidates = first["etd"]["candidates"]
    assert len(candidates) == 3
    assert candidates[0]["probability"] >= candidates[1]["probability"]
    top = candidates[0]
    assert top["id"] == first["etd"]["gnn_answer"] and first["prediction_ids"] == [top["id"]]
    assert first["prediction"] == [top["name"]]
    assert all(len(fact) == 3 for fact in top["evidence"])
    assert main(["eval", str(out), "--protocol", "engine", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["overall"]["hits1"] == result["hits1"]
    # --seed draws the sample of the held-out part; another split would hold training questions
    checkpoint = ["--checkpoint", str(tmp_path / "ckpt" / "best.pt"), "--gnn-only"]
    assert main(["etd", "run", *common, *checkpoint, "--split", "test", "--sample", "2", "--seed", "3",
                 "--out", str(tmp_path / "s3.jsonl"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["questions"] == 2
    assert main(["etd", "run", *common, *checkpoint, "--split", "test", "--split-seed", "1", "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "run with --split-seed 0" in capsys.readouterr().err

    class SecondChoice:  # a language model that always picks option B (or replies ``reply``)
        def __init__(self, reply: str = "The correct answer is B.") -> None:
            self.prompts: list[str] = []
            self.stops: list = []
            self.reply = reply

        def generate_batch(self, prompts: list[str], *, max_new_tokens: int = 256, stop=None) -> list[Generation]:
            self.prompts.extend(prompts)
            self.stops.extend(stop)
            return [Generation(self.reply)] * len(prompts)

    model, _ = load_checkpoint(tmp_path / "ckpt" / "best.pt")
    questions = read_metaqa_questions(qa)[:5]
    with open_store(store) as opened:
        # names for the ids: the prompt shows names, in the options and in their facts alike
        opened.add_triples([Triple(f"film{i}", "type.object.name", Literal.make(f"Film {i}", lang="en")) for i in range(16)])
        opened.add_triples([Triple(f"director{i}", "type.object.name", Literal.make(f"Director {i}", lang="en")) for i in range(5)])
        lm, models = SecondChoice(), Models()
        summary = run_method(EtdMethod(opened, models, EtdConfig(), model, models.meter.lm(lm)), questions, tmp_path / "llm.jsonl")
    records = [json.loads(line) for line in (tmp_path / "llm.jsonl").read_text().splitlines()]
    assert summary["calls_per_question"]["llm"] == 0.2 and len(lm.prompts) == 5  # the batch's five prompts in one call
    assert lm.prompts[0].startswith(TASK_DESCRIPTION + "\nQuestion: who directed [film0]\nReference answers:\nA. ")
    assert "{relevant facts: (Film 0, " in lm.prompts[0] and not re.search(r"[(, ](film|director)\d", lm.prompts[0])
    assert all(r["etd"]["label"] == "B" and r["prediction_ids"] == [r["etd"]["candidates"][1]["id"]] for r in records)
    # each prompt decodes until a whole line gives its label
    assert len(lm.stops) == 5 and lm.stops[0]("The correct answer is B.\nBecause") and not lm.stops[0]("The correct answer is B.")
    # a reply that names no option and gives no answer leaves the prediction empty, and the record says why
    with open_store(store) as opened:
        run_method(EtdMethod(opened, models, EtdConfig(), model, models.meter.lm(SecondChoice(" \n"))), questions[:2],
                   tmp_path / "silent.jsonl")
    records = [json.loads(line) for line in (tmp_path / "silent.jsonl").read_text().splitlines()]
    assert [(r["prediction"], r["warning"]) for r in records] == [([], "the language model's reply is empty")] * 2


@pytest.mark.model
def test_bad_training_settings_are_refused_before_training():
    from engine.methods.etd.config import TrainConfig

    for bad, says in (({"epochs": 0}, "epochs must be an integer"), ({"lr": float("nan")}, "lr must be a number, not negative"),
                      ({"dim": 0}, "dim must be"), ({"max_degree": 0}, "max_degree must be"),
                      ({"val_fraction": 0.5, "test_fraction": 0.5}, "the validation and test fractions"),
                      ({"time_budget": -1.0}, "the time budget must be seconds, not negative")):
        with pytest.raises(InvalidInputError, match=f"EtD training settings: {says}"):
            TrainConfig.for_dataset("metaqa-1hop", **bad)
    assert TrainConfig.for_dataset("metaqa-1hop", max_degree=None, test_fraction=0.0).max_degree == 1000  # None: the default
    with pytest.raises(InvalidInputError, match="no EtD paper settings .* for 'metaqa-4hop': use one of metaqa-1hop"):
        TrainConfig.for_dataset("metaqa-4hop")  # never a silent stand-in


def test_a_checkpoint_save_stopped_part_way_leaves_the_earlier_checkpoint_whole(tmp_path, monkeypatch):
    from pathlib import Path

    from engine.methods.etd import training
    from engine.methods.etd.config import TrainConfig
    from engine.methods.etd.model import EtDConfig, EtDModel

    config = TrainConfig.for_dataset("metaqa-1hop", dim=8)
    model = EtDModel(EtDConfig(1, 3, 8, None, ("r",)), torch.zeros(1, 4))
    best = tmp_path / "best.pt"
    training._save(best, model, config, epoch=1, val_hits1=0.5)
    save = torch.save

    def cut_short(value, file):  # the process stops while the file is half written
        save(value, file)
        Path(file).write_bytes(Path(file).read_bytes()[:100])
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", cut_short)
    with pytest.raises(KeyboardInterrupt):
        training._save(best, model, config, epoch=2, val_hits1=0.9)
    monkeypatch.undo()
    assert load_checkpoint(best)[1]["epoch"] == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["best.pt"]


def test_a_file_that_is_no_checkpoint_is_named_and_never_run(tmp_path, capsys):
    import pickle

    class Runs:
        def __reduce__(self):  # unpickling it would call print: a checkpoint is read as tensors only
            return (print, ("ran",))

    files = {"text.pt": b"[recipes]\n", "code.pt": pickle.dumps(Runs(), protocol=2), "plain.pt": None, "broken.pt": None}
    for name, content in files.items():
        if content is not None:
            (tmp_path / name).write_bytes(content)
    torch.save({"a": 1}, tmp_path / "plain.pt")
    torch.save({"model": {"dim": 4}, "train": {}, "state_dict": {}}, tmp_path / "broken.pt")
    for name, says in (("text.pt", "torch cannot read it"), ("code.pt", "torch cannot read it"),
                       ("plain.pt", "no model, train and state_dict in it"), ("broken.pt", "its model does not load")):
        with pytest.raises(InvalidInputError, match=f"{name} is not an EtD checkpoint: .*{says}"):
            load_checkpoint(tmp_path / name)
    assert "ran" not in capsys.readouterr().out
    with pytest.raises(InvalidInputError, match="missing.pt does not exist: train one with `kgqa etd train --checkpoint-dir DIR`"):
        load_checkpoint(tmp_path / "missing.pt")


def test_training_takes_the_question_flags_of_every_command(tmp_path, capsys):
    """``kgqa etd train`` selects its questions as every command does (``--split --sample
    --limit --seed --split-seed``) and refuses a split holding the validation questions."""
    kb, qa = _toy_kb_and_questions(tmp_path)
    store = str(tmp_path / "store")
    assert main(["load", str(kb), "--format", "metaqa", "--store", store, "--no-progress"]) == 0
    common = ["etd", "train", "--dataset", str(qa), "--paper-config", "metaqa-1hop", "--store", store, "--no-progress",
              "--epochs", "1", "--dim", "8"]
    for split in ("val", "all"):
        assert main([*common, "--checkpoint-dir", str(tmp_path / split), "--split", split]) == 2
        assert f"--split {split} holds the validation questions" in capsys.readouterr().err
    # a question file's name is no dataset with the paper's settings: the option that names one is said
    assert main([*common, "--checkpoint-dir", str(tmp_path / "none"), "--paper-config", "metaqa-4hop"]) == 2
    assert ("no EtD paper settings (L, K) for 'metaqa-4hop': name them with --paper-config, one of metaqa-1hop"
            in capsys.readouterr().err)
    capsys.readouterr()
    assert main([*common, "--checkpoint-dir", str(tmp_path / "ckpt"), "--sample", "9", "--limit", "5", "--seed", "2",
                 "--split-seed", "1"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["train_questions"], summary["val_questions"]) == (5, 5)  # 48 questions: 38 / 5 / 5
    _, saved = load_checkpoint(tmp_path / "ckpt" / "best.pt")
    assert (saved["train"]["max_train"], saved["train"]["seed"], saved["train"]["split_seed"]) == (5, 2, 1)


@pytest.mark.model
def test_time_budget_stops_training_and_the_frontier_cap_is_saved(tmp_path, capsys):
    kb, qa = _toy_kb_and_questions(tmp_path)
    store = str(tmp_path / "store")
    assert main(["load", str(kb), "--format", "metaqa", "--store", store, "--no-progress"]) == 0
    capsys.readouterr()
    code = main(["etd", "train", "--dataset", str(qa), "--paper-config", "metaqa-1hop", "--store", store, "--no-progress",
                 "--checkpoint-dir", str(tmp_path / "ckpt"), "--epochs", "5", "--dim", "16", "--time-budget", "0",
                 "--max-frontier", "2", "--encoding-cache", str(tmp_path / "enc")])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["epochs"] == 1 and summary["stopped_by"] == "time budget"
    model, saved = load_checkpoint(tmp_path / "ckpt" / "best.pt")
    assert model.config.max_frontier == 2 and all(layer.max_nodes == 2 for layer in model.layers)
    assert saved["train"]["max_frontier"] == 2
    assert not model.training and not model.config.mask_topic
    assert len(list((tmp_path / "enc").glob("encodings-*.pt"))) == 3  # relations, training and validation questions
    # going on from that checkpoint: with lr 0 the weights are exactly the ones it started from
    capsys.readouterr()
    code = main(["etd", "train", "--dataset", str(qa), "--paper-config", "metaqa-1hop", "--store", store, "--no-progress",
                 "--checkpoint-dir", str(tmp_path / "again"), "--epochs", "1", "--dim", "16", "--max-frontier", "2",
                 "--lr", "0", "--encoding-cache", str(tmp_path / "enc"), "--init-from", str(tmp_path / "ckpt" / "best.pt")])
    assert code == 0
    again, _ = load_checkpoint(tmp_path / "again" / "best.pt")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    capsys.readouterr()
    assert main(["etd", "train", "--dataset", str(qa), "--paper-config", "metaqa-1hop", "--store", store, "--no-progress",
                 "--checkpoint-dir", str(tmp_path / "other"), "--epochs", "1", "--dim", "8",
                 "--encoding-cache", str(tmp_path / "enc"), "--init-from", str(tmp_path / "ckpt" / "best.pt")]) == 2
    assert "was trained with" in capsys.readouterr().err
    # questions over another graph: not one reaches an answer, and nothing is trained from them
    (tmp_path / "elsewhere.txt").write_text("film99|directed_by|director99\n")
    assert main(["load", str(tmp_path / "elsewhere.txt"), "--format", "metaqa", "--store", str(tmp_path / "elsewhere"),
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["etd", "train", "--dataset", str(qa), "--paper-config", "metaqa-1hop", "--store", str(tmp_path / "elsewhere"),
                 "--no-progress", "--checkpoint-dir", str(tmp_path / "nothing"), "--epochs", "1", "--dim", "8",
                 "--encoding-cache", str(tmp_path / "enc")]) == 2
    assert "none of the 38 training questions reaches a gold answer within 1 hop" in capsys.readouterr().err
    assert not (tmp_path / "nothing" / "best.pt").exists()


def test_masked_question_texts_replace_every_topic_mention():
    questions = [
        Question("1", "who directed [Moving Out] and when was [moving out] released", [], ["Moving Out"], []),
        Question("2", "which nationality is anne_of_austria 's couple ?", [], ["anne", "anne_of_austria"], []),
        Question("3", "what does [a+b (c)] mean", [], ["a+b (c)"], []),  # regex characters are literal
    ]
    assert question_texts(questions) == [q.question for q in questions]
    X = TOPIC_PLACEHOLDER
    assert question_texts(questions, mask_topic=True) == [
        f"who directed [{X}] and when was [{X}] released",
        f"which nationality is {X} 's couple ?",  # the longest name first, so no "X_of_austria"
        f"what does [{X}] mean",
    ]


@pytest.mark.model
def test_masked_training_is_saved_and_predict_encodes_the_masked_texts(tmp_path, capsys, monkeypatch):
    import engine.methods.etd.pipeline as etd_pipeline

    kb, qa = _toy_kb_and_questions(tmp_path)
    store = str(tmp_path / "store")
    assert main(["load", str(kb), "--format", "metaqa", "--store", store, "--no-progress"]) == 0
    common = ["--dataset", str(qa), "--store", store, "--no-progress"]
    assert main(["etd", "train", *common, "--paper-config", "metaqa-1hop", "--checkpoint-dir", str(tmp_path / "ckpt"), "--epochs", "1",
                 "--dim", "16", "--mask-topic"]) == 0
    model, saved = load_checkpoint(tmp_path / "ckpt" / "best.pt")
    assert model.config.mask_topic and saved["train"]["mask_topic"]
    encoded: list[str] = []
    real = etd_pipeline.encode_texts

    def recording(texts, *args, **kwargs):
        encoded.extend(texts)
        return real(texts, *args, **kwargs)

    monkeypatch.setattr(etd_pipeline, "encode_texts", recording)
    capsys.readouterr()
    assert main(["etd", "run", *common, "--checkpoint", str(tmp_path / "ckpt" / "best.pt"), "--split", "all",
                 "--gnn-only", "--limit", "2", "--out", str(tmp_path / "pred.jsonl")]) == 0
    assert encoded == [f"who directed [{TOPIC_PLACEHOLDER}]", f"what genre is [{TOPIC_PLACEHOLDER}]"]
    records = [json.loads(line) for line in (tmp_path / "pred.jsonl").read_text().splitlines()]
    assert [r["question"] for r in records] == ["who directed [film0]", "what genre is [film0]"]  # as asked


@pytest.mark.model
def test_causal_encoder_mean_pools_the_offline_lm_through_the_lm_layer():
    from engine.methods.etd.model import encode_texts
    from engine.models.loading import default_lm_path, load_lm

    texts = ["who directed [Titanic]", "what genre is [M]", "who directed [Titanic]"]
    got = encode_texts(texts, "causal:" + default_lm_path(), batch_size=2)
    hidden = load_lm(default_lm_path()).model.config.hidden_size
    assert got.shape == (3, hidden) and got.dtype == torch.float32
    assert torch.allclose(got[0], got[2], atol=1e-4)  # the same text, batched with different neighbours
    assert not torch.allclose(got[0], got[1])
