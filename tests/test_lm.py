"""The language-model layer: the offline SmolLM2 (loaded once per session) where its answers
matter, the tiny random model where any model shows it (batched decoding and scoring against
one prompt at a time), trie-constrained decoding, and the OpenAI-compatible client against a
canned local HTTP server."""
from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from engine import deadlines
from engine.errors import DeadlineExceededError, InvalidInputError, KGQAError, UnsupportedOperationError
from engine.models import greedy
from engine.models.loading import load_lm, local_source
from engine.models.openai_lm import OpenAIChatLM
from engine.models.sft import SftConfig
from engine.models.transformers_lm import TransformersLM
from engine.models.trie import TokenTrie
from tests.http_stub import JsonHandler, serving


# ----------------------------------------------------------------------------- trie
def test_trie_walks_prefixes():
    trie = TokenTrie([[1, 2, 3], [1, 2], [4]])
    assert sorted(TokenTrie.next_tokens(trie.root)) == [1, 4]
    node = trie.node([1, 2])
    assert node is not None and TokenTrie.ends_at(node) and TokenTrie.next_tokens(node) == [3]
    assert trie.node([2]) is None
    assert [1, 2, 3] in trie and [1] not in trie
    assert trie.longest == 3
    with pytest.raises(ValueError):
        trie.add([])


# ----------------------------------------------------------------------------- local model
@pytest.fixture(scope="session")
def lm() -> TransformersLM:
    model = load_lm()
    assert isinstance(model, TransformersLM)
    return model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> TransformersLM:
    """The tiny random model (one token a character), for what holds of any model: batched
    decoding and scoring against one prompt at a time."""
    from tests.tiny_lm import make_tiny_lm

    return TransformersLM.load(make_tiny_lm(tmp_path_factory.mktemp("tiny") / "lm"), "cpu", "raw", "float32")


@pytest.mark.model
def test_load_lm_is_cached(lm):
    assert load_lm() is lm
    assert lm.template == "chat"


@pytest.mark.model
def test_greedy_logprobs_match_rescoring(lm):
    prompt = "What is the capital of France? Answer in one word."
    g = lm.generate(prompt, max_new_tokens=4, logprobs=True)
    assert g.text and g.tokens and len(g.tokens) <= 4
    assert g.score == pytest.approx(sum(t.logprob for t in g.tokens))
    # scoring the generated text again gives the same per-token log-probabilities
    rescored = lm.token_logprobs(prompt, "".join(t.token for t in g.tokens))
    assert [t.token for t in rescored] == [t.token for t in g.tokens]
    assert [t.logprob for t in rescored] == pytest.approx([t.logprob for t in g.tokens], abs=1e-3)
    assert all(t.logprob <= 0 for t in rescored)


def test_generate_batch_equals_one_by_one(tiny):
    prompts = ["Name a colour.", "What is 2 + 2? Answer with a number.", "Say yes or no: is water wet?"]
    single = [tiny.generate(p, max_new_tokens=6) for p in prompts]
    batched = tiny.generate_batch(prompts, max_new_tokens=6)
    assert [g.text for g in batched] == [g.text for g in single]  # left padding changes nothing
    assert [g.prompt_tokens for g in batched] == [len(tiny.prompt_ids(p)) for p in prompts] == [g.prompt_tokens for g in single]
    assert all(1 <= g.completion_tokens <= 6 for g in batched)
    assert [g.completion_tokens for g in batched] == [g.completion_tokens for g in single]


@pytest.mark.model
def test_generate_batch_groups_prompts_of_similar_length_within_a_token_budget(lm):
    lengths = [4000, 10, 12, 11, 300, 13, 2500, 290, 14, 15, 16, 17]
    chunks = lm._chunks(lengths)
    assert sorted(i for c in chunks for i in c) == list(range(len(lengths)))
    assert all(len(c) <= lm.batch_size and (len(c) == 1 or len(c) * max(lengths[i] for i in c) <= lm.batch_tokens) for c in chunks)
    assert [0] in chunks and [6] in chunks  # long prompts alone
    assert [1, 3, 2, 5, 8, 9, 10, 11] in chunks  # short ones together, shortest first


def test_generate_batch_stops_each_row_as_generate_does(tiny):
    prompts = ["Count from one to ten in words.", "List three colours, separated by commas.", "Name a colour."]
    stop = lambda text: len(set(text)) < len(text)  # a character repeats: at another step in another row
    single = [tiny.generate(p, max_new_tokens=12, stop=stop) for p in prompts]
    batched = tiny.generate_batch(prompts, max_new_tokens=12, stop=stop)
    assert [g.text for g in batched] == [g.text for g in single]
    assert [g.completion_tokens for g in batched] == [g.completion_tokens for g in single]
    assert any(g.completion_tokens < 12 for g in single)  # the stop ended a row before the cap
    assert len({g.completion_tokens for g in single}) > 1  # and rows at different steps
    # a rule per prompt (None: only the cap ends it)
    rules = [lambda text: len(text) >= 2, None, lambda text: len(text) >= 5]
    single = [tiny.generate(p, max_new_tokens=12, stop=r) for p, r in zip(prompts, rules)]
    batched = tiny.generate_batch(prompts, max_new_tokens=12, stop=rules)
    assert [g.text for g in batched] == [g.text for g in single]
    assert [g.completion_tokens for g in batched] == [g.completion_tokens for g in single]
    with pytest.raises(ValueError, match="2 stop rules for 3 prompts"):
        tiny.generate_batch(prompts, max_new_tokens=2, stop=rules[:2])


def _forward_shapes(lm, monkeypatch) -> list[tuple[int, int]]:
    """The (rows, tokens) of every forward pass the model makes from now on."""
    shapes: list[tuple[int, int]] = []
    forward = lm.model.forward

    def spy(*args, **kwargs):
        shapes.append(tuple(kwargs["input_ids"].shape))
        return forward(*args, **kwargs)

    monkeypatch.setattr(lm.model, "forward", spy)
    return shapes


def test_generate_batch_reads_a_common_prefix_once(tiny, monkeypatch):
    instructions = "You answer questions about films. Answer with one name and nothing else, no explanation. "
    prompts = [instructions + q for q in ("Who directed Jaws?", "Name a comedy from 1989.", "Who wrote the film Psycho?")]
    encoded = [tiny.prompt_ids(p) for p in prompts]
    shared = greedy.shared_prefix(encoded)
    assert shared >= 30  # the chat preamble and the instructions
    single = [tiny.generate(p, max_new_tokens=8) for p in prompts]
    shapes = _forward_shapes(tiny, monkeypatch)
    batched = tiny.generate_batch(prompts, max_new_tokens=8)
    assert [g.text for g in batched] == [g.text for g in single]
    assert [g.completion_tokens for g in batched] == [g.completion_tokens for g in single]
    # the prefix once for one row, then each row's own tokens, then a token at a time
    assert shapes[:2] == [(1, shared), (3, max(map(len, encoded)) - shared)]
    assert all(tokens == 1 for _, tokens in shapes[2:])


def test_a_row_that_ends_leaves_the_batch(tiny, monkeypatch):
    prompts = ["Count from one to ten in words.", "List three colours, separated by commas.", "Name a colour."]
    rules = [lambda text: len(text) >= 2, None, lambda text: len(text) >= 5]
    shapes = _forward_shapes(tiny, monkeypatch)
    batched = tiny.generate_batch(prompts, max_new_tokens=12, stop=rules)
    steps = [rows for rows, tokens in shapes if tokens == 1]
    assert steps == sorted(steps, reverse=True) and steps[-1] < 3
    # each step computed only the rows still going: one token each, after the prompts' first
    assert sum(steps) == sum(g.completion_tokens for g in batched) - len(prompts)


def test_a_model_whose_config_changes_the_scores_is_batched_as_generate_decodes(tiny, monkeypatch):
    prompts = ["Repeat the word cat ten times.", "Write the letter a eight times."]
    plain = [g.text for g in tiny.generate_batch(prompts, max_new_tokens=12)]
    monkeypatch.setattr(tiny.model.generation_config, "repetition_penalty", 1.8)
    assert not greedy.plain_argmax(tiny.model)
    penalised = [g.text for g in tiny.generate_batch(prompts, max_new_tokens=12)]
    assert penalised == [tiny.generate(p, max_new_tokens=12).text for p in prompts]
    assert penalised != plain  # the penalty is applied, not ignored


def test_the_float32_cache_decodes_exactly_as_transformers_own(tiny, monkeypatch):
    """The float32 cache's bookkeeping (buffers written in place, the prompt's own states
    first) changes nothing: forced on for the float32 model, the same tokens and scores."""
    prompts = ["Count from one to ten in words.", "Name a colour.", "What is 2 + 2? Answer with a number."]
    same_length = ["Name a colour.", "Name a number."]  # a batch without padding decodes over it too
    assert len(tiny.prompt_ids(same_length[0])) == len(tiny.prompt_ids(same_length[1]))
    plain = [tiny.generate(p, max_new_tokens=10, logprobs=True) for p in prompts]
    plain_batch = tiny.generate_batch(same_length, max_new_tokens=10)
    monkeypatch.setattr(tiny, "float32_decoding", True)
    cached = [tiny.generate(p, max_new_tokens=10, logprobs=True) for p in prompts]
    assert [g.text for g in cached] == [g.text for g in plain]
    assert [t.logprob for g in cached for t in g.tokens] == pytest.approx([t.logprob for g in plain for t in g.tokens], abs=1e-5)
    assert [g.text for g in tiny.generate_batch(same_length, max_new_tokens=10)] == [g.text for g in plain_batch]


def test_a_16_bit_model_on_a_cpu_decodes_with_a_float32_cache(tmp_path):
    import torch

    from engine.models.float32_cache import Float32Layer
    from tests.tiny_lm import make_tiny_lm

    tiny = make_tiny_lm(tmp_path / "tiny")
    float32 = TransformersLM.load(tiny, "cpu", "raw", "float32")
    assert not float32.float32_decoding and float32.decoding_cache(False, 4000, 10) is None
    lm = TransformersLM.load(tiny, "cpu", "raw", "bfloat16")
    assert lm.float32_decoding and lm.model.config._attn_implementation == "kgqa_float32_decode"
    # prompts without padding only (padded ones attend through masks: transformers' own cache)
    assert isinstance(lm.decoding_cache(False, 10, 5).layers[0], Float32Layer)
    assert lm.decoding_cache(True, 4000, 5) is None
    seen = []
    forward = torch.nn.functional.scaled_dot_product_attention

    def spy(query, key, value, *args, **kwargs):
        seen.append((query.shape[-2], query.dtype, key.dtype))
        return forward(query, key, value, *args, **kwargs)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
        single = [lm.generate(p, max_new_tokens=5) for p in ("abc", "hello there")]
    # the prompt attends in bfloat16 over its own states, each new token in float32 over the cache
    assert {s for s in seen if s[0] > 1} == {(3, torch.bfloat16, torch.bfloat16), (11, torch.bfloat16, torch.bfloat16)}
    assert {s for s in seen if s[0] == 1} == {(1, torch.float32, torch.float32)}
    assert all(g.completion_tokens == 5 for g in single)


def test_a_prompt_longer_than_the_models_context_is_refused_before_it_runs(tmp_path, monkeypatch):
    from tests.tiny_lm import make_tiny_lm

    lm = TransformersLM.load(make_tiny_lm(tmp_path / "tiny"), "cpu", "raw", "float32")
    assert lm.context_tokens == 8192  # the offline model's, one token a character here
    extra = len(lm.prompt_ids("a")) - 1
    assert len(lm.prompt_ids("a" * (8192 - extra))) == 8192
    too_long = "a" * (8193 - extra)

    def run(*args, **kwargs):
        raise AssertionError("the model ran")

    monkeypatch.setattr(lm.model, "forward", run)
    for call in (
        lambda: lm.generate(too_long, max_new_tokens=2),
        lambda: lm.generate_batch(["short", too_long], max_new_tokens=2),
        lambda: lm.beam_search(too_long, num_beams=2, max_new_tokens=2),
        lambda: lm.score_batch(too_long, ["x", "y"]),
        lambda: lm.token_logprobs(too_long, "x"),
    ):
        with pytest.raises(InvalidInputError, match=r"a prompt of 8,193 tokens is longer than the 8,192 that .*tiny reads: shorten"):
            call()


def test_decoding_stops_within_a_step_of_the_deadline(tmp_path, monkeypatch):
    from engine import deadlines
    from engine.errors import DeadlineExceededError
    from tests.tiny_lm import make_tiny_lm

    lm = TransformersLM.load(make_tiny_lm(tmp_path / "tiny"), "cpu", "raw", "float32")
    clock = [0.0]  # a forward pass takes a second on this clock
    monkeypatch.setattr("engine.deadlines.time.monotonic", lambda: clock[0])
    lm.model.register_forward_hook(lambda *_: clock.__setitem__(0, clock[0] + 1))
    free = lm.generate_batch(["ab", "abc"], max_new_tokens=40)  # no deadline: as ever
    assert clock[0] > 20 and free == lm.generate_batch(["ab", "abc"], max_new_tokens=40)

    def stepwise() -> None:  # a stepwise search decodes on a thread of its own
        steps = lm.beam_search_steps(["ab", "abcd"], num_beams=2, max_new_tokens=40)
        rows = next(steps)
        while True:
            rows = steps.send([None] * len(rows))

    for call in (
        lambda: lm.generate("ab", max_new_tokens=40),
        lambda: lm.generate_batch(["ab", "abc"], max_new_tokens=40),
        lambda: lm.beam_search("ab", num_beams=2, max_new_tokens=40),
        lambda: lm.score_batch("ab", ["x" * i for i in range(1, 200)]),  # many passes
        stepwise,
    ):
        clock[0] = 0.0
        with deadlines.until(2.5), pytest.raises(DeadlineExceededError):
            call()
        assert clock[0] <= 4, call  # at most one pass after the deadline


def test_the_float32_attention_masks_and_scores_as_sdpa_does(tmp_path):
    """Where no float32 cache is involved (a prompt's pass, scoring over a cached prefix), the
    16-bit model computes exactly what it computes under SDPA: the same masks, the same kernel."""
    from tests.tiny_lm import make_tiny_lm

    lm = TransformersLM.load(make_tiny_lm(tmp_path / "tiny"), "cpu", "raw", "bfloat16")
    assert lm.float32_decoding
    prompts = ["a", "hello there, general", "xyz abc"]  # left-padded to the longest
    continuations = [" b", " bc d", " e f g h"]

    def outputs() -> tuple:
        firsts = [g.text for g in lm.generate_batch(prompts, max_new_tokens=1)]
        lm._prefixes.clear()
        return firsts, lm.score_batch("hello", continuations), lm.score_batch("hello there", continuations, eos=True)

    ours = outputs()
    lm.model.set_attn_implementation("sdpa")
    lm.float32_decoding = False
    assert outputs() == ours


@pytest.mark.parametrize(("dtype", "tolerance"), [("float32", 1e-4), ("bfloat16", 1e-2)])
def test_prompts_scored_together_score_as_each_alone(tmp_path, dtype, tolerance):
    """score_many runs prompts that begin alike in one left-padded pass over their common
    beginning, and the continuations of each prompt side by side in its row of one more pass:
    each token gets the log-probability it gets when its prompt is scored alone, and alone as a
    plain pass over prompt and continuation. Random prompts of many lengths, some sharing the
    instructions and some not, pools sharing heads, a pool of one, an empty pool, and passes
    of a few tokens."""
    import random

    from tests.tiny_lm import make_tiny_lm

    lm = TransformersLM.load(make_tiny_lm(tmp_path / "tiny"), "cpu", "raw", dtype)
    rng = random.Random(5)
    instructions = "Choose what to retrieve next for the question below, or None. Question: "
    options = ["entity_1", "entity_12", "entity_2+r", "None", "x", "a much longer relation name"]
    requests = [
        ((instructions if i % 4 else "") + "".join(rng.choices("abc xyz?", k=rng.randint(1, 40))), rng.sample(options, rng.randint(0, 4)))
        for i in range(15)
    ] + [(instructions + "same", ["entity_1", "entity_1"]), (instructions, ["entity_12"])]
    # the prompts with the instructions: their beginning once, then per batch of them one pass
    # for their rests and one for their continuations, a row per prompt (no continuation gets a
    # copy of its prompt's cache)
    alike = [(prompt, pool) for prompt, pool in requests if prompt.startswith(instructions) and pool]
    rows: list[int] = []
    lm.model.register_forward_hook(lambda module, args, kwargs, out: rows.append(len(kwargs["input_ids"])), with_kwargs=True)
    lm.score_tokens = 10_000
    lm.score_many(alike)
    assert len(alike) > lm.batch_size and len(rows) == 1 + 2 * math.ceil(len(alike) / lm.batch_size)
    assert max(rows) == lm.batch_size
    batch_tokens, lm.batch_tokens, rows[:] = lm.batch_tokens, max(len(lm.prompt_ids(prompt)) for prompt, _ in alike) + 1, []
    lm.score_many(alike)  # no two of them within the tokens of a batch: each alone
    assert max(rows) == 1
    lm.batch_tokens = batch_tokens
    lm.score_tokens = 5
    for eos in (False, True):
        together = lm.score_many(requests, eos=eos)
        alone = [lm.score_batch(prompt, pool, eos=eos) for prompt, pool in requests]
        assert [[len(s) for s in pool] for pool in together] == [[len(s) for s in pool] for pool in alone]
        for got, want in zip(together, alone):
            assert got == [pytest.approx(w, abs=tolerance) for w in want]
    plain = [[[t.logprob for t in lm.token_logprobs(prompt, c)] for c in pool] for prompt, pool in requests]
    assert lm.score_many(requests) == [[pytest.approx(p, abs=tolerance) for p in pool] for pool in plain]
    assert lm.score_many([]) == [] and lm.score_many([("q", [])]) == [[]]


def test_the_float32_layer_keeps_every_state_through_growth_and_cropping():
    import torch

    from engine.models.float32_cache import Float32Layer

    torch.manual_seed(0)
    states = [torch.randn(2, 3, n, 4, dtype=torch.bfloat16) for n in (5, 1, 1, 3)]
    layer = Float32Layer(capacity=6)
    keys, values = layer.update(states[0], -states[0])
    assert keys is states[0] and keys.dtype == torch.bfloat16  # the prompt attends over its own states
    for state in states[1:]:  # the last update outgrows the capacity
        keys, values = layer.update(state, -state)
    expected = torch.cat(states, dim=-2).float()
    assert keys.dtype == values.dtype == torch.float32 and torch.equal(keys, expected) and torch.equal(values, -expected)
    assert layer.get_seq_length() == 10
    layer.crop(-4)  # replaces the layer's tensors: the next update starts from them
    keys, _ = layer.update(states[1], -states[1])
    assert torch.equal(keys, torch.cat([expected[..., :6, :], states[1].float()], dim=-2))
    layer.batch_select_indices(torch.tensor([1]))
    keys, values = layer.update(states[2][1:], -states[2][1:])
    assert keys.shape == (1, 3, 8, 4) and torch.equal(values[..., -1:, :], -states[2][1:].float())


@pytest.mark.model
def test_constrained_beam_search_stays_in_the_trie(lm):
    options = ["directed_by", "starred_actors", "has_genre"]
    sequences = [lm.encode(o) + [lm.eos_token_id] for o in options]
    trie = TokenTrie(sequences)

    def allowed(prefix):
        node = trie.node(prefix)
        # after the end (finished beams are still asked) only eos
        return (TokenTrie.next_tokens(node) if node else None) or [lm.eos_token_id]

    beams = lm.beam_search("Name a relation of a film.", num_beams=3, max_new_tokens=trie.longest, allowed_tokens=allowed)
    assert len(beams) == 3
    assert sorted(b.text for b in beams) == sorted(options)
    assert all(b.score is not None for b in beams)
    assert [b.score for b in beams] == sorted((b.score for b in beams), reverse=True)


def test_batched_scores_equal_one_by_one_scoring(tiny):
    """score_batch (the prompt once, continuations side by side over its cache, in passes) gives
    every token the log-probability of scoring each continuation on its own; with eos the
    end token is scored after each continuation, and one continuation may prefix another."""
    prompt = "Which relation answers the question: who directed [Titanic]?"
    options = ["Titanic+directed_by", "Titanic+^starred_actors", "Titanic", "None", "entity_1+has_genre x"]
    tiny.score_tokens, most = 8, tiny.score_tokens  # several passes
    try:
        batched = tiny.score_batch(prompt, options)
        ended = tiny.score_batch(prompt, options, eos=True)
    finally:
        tiny.score_tokens = most
    for option, scores, with_eos in zip(options, batched, ended):
        single = [t.logprob for t in tiny.token_logprobs(prompt, option)]
        assert scores == pytest.approx(single, abs=1e-4)
        assert len(with_eos) == len(single) + 1 and with_eos[:-1] == pytest.approx(single, abs=1e-4)
        assert with_eos[-1] < 0
    assert tiny.score(prompt, options) == pytest.approx([sum(s) for s in batched], abs=1e-4)
    # a prompt that begins like an earlier one reuses that beginning's cache: same scores
    other = prompt.replace("[Titanic]?", "[Avatar] and [Titanic]?")
    assert tiny.score_batch(other, options[:2]) == [
        pytest.approx([t.logprob for t in tiny.token_logprobs(other, o)], abs=1e-4) for o in options[:2]
    ]
    assert tiny.score_batch(prompt, []) == []
    assert tiny.score_batch(prompt, ["same", "same"])[0] == pytest.approx(tiny.score_batch(prompt, ["same"])[0], abs=1e-4)

def _counted(lm: TransformersLM, work) -> tuple[int, int]:
    """The tokens ``lm`` read and wrote doing ``work()``."""
    read, written, untold = lm.tokens.snapshot()
    work()
    after = lm.tokens.snapshot()
    assert after[2] == untold  # a local model tells every call's tokens
    return after[0] - read, after[1] - written


def test_a_local_model_counts_the_tokens_it_reads_and_writes_batched_as_one_by_one(tiny):
    """Every prompt is read once per call (its template included) and every generated token of
    the sequences returned is written, whether prompts go one by one or in a batch; scoring reads
    the prompt once and every continuation's tokens (and the end token after each with eos)."""
    prompts = ["Name a colour.", "What is 2 + 2? Answer with a number.", "Say yes or no: is water wet?"]
    prompt_tokens = sum(len(tiny.prompt_ids(p)) for p in prompts)
    single: list = []
    one_by_one = _counted(tiny, lambda: single.extend(tiny.generate(p, max_new_tokens=6) for p in prompts))
    assert one_by_one == (prompt_tokens, sum(g.completion_tokens for g in single))
    assert _counted(tiny, lambda: tiny.generate_batch(prompts, max_new_tokens=6)) == one_by_one
    # one beam is greedy decoding: the same tokens; more beams read each prompt once still
    assert _counted(tiny, lambda: tiny.beam_search_batch(prompts, num_beams=1, max_new_tokens=6)) == one_by_one
    read, written = _counted(tiny, lambda: tiny.beam_search_batch(prompts, num_beams=3, max_new_tokens=6))
    assert read == prompt_tokens and one_by_one[1] <= written <= 3 * 6 * len(prompts)

    prompt, options = prompts[1], ["4", "four", "None"]
    continuation_tokens = sum(len(tiny.encode(o)) for o in options)
    assert _counted(tiny, lambda: tiny.score_batch(prompt, options)) == (len(tiny.prompt_ids(prompt)) + continuation_tokens, 0)
    assert _counted(tiny, lambda: tiny.score_batch(prompt, options, eos=True)) == (
        len(tiny.prompt_ids(prompt)) + continuation_tokens + len(options), 0)
    requests = [(prompt, options), (prompts[0], ["red"]), (prompts[2], [])]
    together = _counted(tiny, lambda: tiny.score_many(requests))
    alone = [_counted(tiny, lambda r=r: tiny.score_batch(*r)) for r in requests]
    assert together == tuple(map(sum, zip(*alone))) and alone[2] == (0, 0)  # nothing to score: nothing read
    assert _counted(tiny, lambda: tiny.token_logprobs(prompt, "four")) == (len(tiny.prompt_ids(prompt)) + len(tiny.encode("four")), 0)


# ----------------------------------------------------------------------------- chat endpoint
_RAW_BODIES = {
    "page": b"<html>Bad gateway</html>",
    "deep": b"[" * 100_000 + b"]" * 100_000,
    # a JSON escape of half a surrogate pair
    "surrogate": b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris \\ud800"}}]}',
}


def test_the_model_is_given_its_cache_by_the_name_its_transformers_takes(tiny, tmp_path, recwarn):
    """transformers 5 renamed the forward pass's ``past_key_values`` to ``cache`` (the old name
    warns, and goes in 5.40): decoding (over the float32 cache of a 16-bit model too), scoring
    and scoring over a cached prefix use the name the installed release takes, so none warns."""
    from tests.tiny_lm import make_tiny_lm

    bf16 = TransformersLM.load(make_tiny_lm(tmp_path / "tiny"), "cpu", "raw", "bfloat16")
    assert bf16.float32_decoding and bf16.generate("ab", max_new_tokens=3).completion_tokens == 3
    tiny._prefixes.clear()
    tiny.generate_batch(["ab", "abc", "abcd"], max_new_tokens=3)
    tiny.score_batch("hello there", ["x", "yz"], eos=True)
    tiny.score_batch("hello there, again", ["x"])  # over the cached "hello there"
    tiny.score_many([("ab", ["x", "y"]), ("abc", ["z"])])
    assert not [str(w.message) for w in recwarn if "past_key_values" in str(w.message)]


class _Canned(JsonHandler):
    """Answers /v1/chat/completions; fails with 503 first when the server's ``fail_first`` is set;
    never answers model ``stall`` and trickles the body of model ``trickle`` (until the server's
    ``release`` is set)."""

    def do_POST(self) -> None:  # noqa: N802 — http.server's naming
        body = self.read_json()
        server = self.server
        server.requests.append((self.path, body, self.headers.get("Authorization")))  # type: ignore[attr-defined]
        if server.fail_first > 0:  # type: ignore[attr-defined]
            server.fail_first -= 1  # type: ignore[attr-defined]
            self.send_json(503, {"error": "overloaded"})
            return
        if body["model"] == "bad":
            self.send_json(400, {"error": "unknown model"})
            return
        if body["model"] == "stall":
            server.release.wait(60)  # type: ignore[attr-defined]
            return
        if body["model"] == "trickle":  # headers at once, then a byte of the body every 0.2 s
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            while not server.release.wait(0.2):  # type: ignore[attr-defined]
                self.wfile.write(b" ")
                self.wfile.flush()
            return
        if body["model"] in _RAW_BODIES:  # a proxy's page, JSON nested deeper than a parser follows, ...
            data = _RAW_BODIES[body["model"]]
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        choices = []
        for i in range(body.get("n", 1)):
            text = ["Paris", "Lyon", "Paris"][i % 3]
            choice = {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            if body.get("logprobs"):
                choice["logprobs"] = {"content": [{"token": text, "logprob": -0.25 * (i + 1), "top_logprobs": []}]}
            choices.append(choice)
        self.send_json(200, {"id": "x", "object": "chat.completion", "choices": choices})


@pytest.fixture
def chat_server() -> Iterator[ThreadingHTTPServer]:
    with serving(_Canned, requests=[], fail_first=0, release=threading.Event()) as server:
        yield server
        server.release.set()


def _client(server: ThreadingHTTPServer, model: str = "m", **options) -> OpenAIChatLM:
    return OpenAIChatLM(model, f"http://127.0.0.1:{server.server_address[1]}/v1", retry_wait=0.01, timeout=5, **options)


def test_chat_generate_with_logprobs(chat_server):
    lm = _client(chat_server, api_key="sk-test")
    g = lm.generate("capital of France?", max_new_tokens=8, logprobs=True)
    assert g.text == "Paris" and g.score == -0.25 and g.tokens[0].token == "Paris"
    path, body, auth = chat_server.requests[0]
    assert path == "/v1/chat/completions" and auth == "Bearer sk-test"
    assert body["messages"] == [{"role": "user", "content": "capital of France?"}]
    assert (body["temperature"], body["max_tokens"], body["logprobs"]) == (0.0, 8, True)
    assert lm.generate("again").tokens is None
    assert lm.tokens.snapshot() == (0, 0, 2)  # the server sent no usage: the calls' tokens are untold


def test_chat_retries_a_503(chat_server):
    chat_server.fail_first = 2
    assert _client(chat_server).generate("q").text == "Paris"
    assert len(chat_server.requests) == 3


def test_chat_gives_up_with_a_clear_error(chat_server):
    chat_server.fail_first = 10
    with pytest.raises(KGQAError, match="failed 3 times"):
        _client(chat_server, retries=3).generate("q")
    chat_server.fail_first = 0
    chat_server.requests.clear()
    with pytest.raises(KGQAError, match="HTTP 400"):
        _client(chat_server, "bad").generate("q")
    assert len(chat_server.requests) == 1  # a client error is not retried
    with pytest.raises(KGQAError, match=r"returned the text 'Paris \\ud800': it is not valid Unicode") as raised:
        _client(chat_server, "surrogate").generate("q")
    assert not isinstance(raised.value, InvalidInputError)  # the server's fault, not the question's
    for model, says in (("page", "Expecting value"), ("deep", "JSON nested too deep")):
        with pytest.raises(KGQAError, match=rf"/v1/chat/completions answered with a body that is not JSON \({says}"):
            _client(chat_server, model).generate("q")


def test_a_server_that_never_answers_stops_at_the_deadline(chat_server):
    # each request would wait 5 s and be tried 3 times; the deadline comes first, in the
    # threads of a batch's concurrent requests too
    lm = _client(chat_server, "stall", retries=3)
    for ask in (lambda: lm.generate("q"), lambda: lm.generate_batch(["q1", "q2"])):
        with pytest.raises(DeadlineExceededError), deadlines.until(time.monotonic() + 0.3):
            ask()


def test_a_server_that_trickles_its_reply_stops_at_the_deadline(chat_server):
    # each read of the body comes back within 0.2 s, so the socket's timeout never trips; the
    # whole body would take hours
    lm = _client(chat_server, "trickle", retries=3)
    raised: list[BaseException] = []

    def ask() -> None:
        try:
            with deadlines.until(time.monotonic() + 2):
                lm.generate("q")
        except BaseException as e:  # noqa: BLE001 — the test looks at what it was
            raised.append(e)

    asking = threading.Thread(target=ask, daemon=True)
    asking.start()
    asking.join(60)
    assert not asking.is_alive(), "the request outlasted its deadline"
    assert len(raised) == 1 and isinstance(raised[0], DeadlineExceededError)


def test_chat_beam_search_returns_distinct_samples_best_first(chat_server):
    beams = _client(chat_server).beam_search("q", num_beams=3)
    assert [b.text for b in beams] == ["Paris", "Lyon"]
    assert chat_server.requests[0][1]["n"] == 3


def test_chat_refuses_token_constraints(chat_server):
    lm = _client(chat_server)
    with pytest.raises(UnsupportedOperationError):
        lm.generate("q", allowed_tokens=lambda prefix: [0])
    with pytest.raises(UnsupportedOperationError):
        lm.encode("q")
    with pytest.raises(UnsupportedOperationError):
        lm.score_batch("q", ["a", "b"])  # a chat endpoint scores no given text (LDR falls back to a generated choice)


def test_load_lm_names_a_chat_endpoint(chat_server):
    port = chat_server.server_address[1]
    lm = load_lm(f"openai:m@http://127.0.0.1:{port}/v1")
    assert isinstance(lm, OpenAIChatLM) and lm.url == f"http://127.0.0.1:{port}/v1/chat/completions"


@pytest.mark.model
def test_the_weights_load_in_the_precision_asked(lm, tmp_path):
    import torch

    from tests.tiny_lm import make_tiny_lm

    tiny = make_tiny_lm(tmp_path / "tiny")
    assert {p.dtype for p in lm.model.parameters()} == {torch.float32}  # a CPU's default, the GGUF de-quantised
    for dtype, expected in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        model = TransformersLM.load(tiny, "cpu", "raw", dtype)
        assert {p.dtype for p in model.model.parameters()} == {expected}
        scores = model.score("a b c", [" d", " e"])
        assert len(scores) == 2 and all(s < 0 for s in scores)
    # the offline GGUF default, cast after loading: bfloat16 rounds the logits, not a clear decision
    bf16 = TransformersLM.load(local_source(None), "cpu", None, "bfloat16")
    assert {p.dtype for p in bf16.model.parameters()} == {torch.bfloat16}
    prompt = "What is the capital of France? Answer in one word."  # first token: 1.5 logits ahead of the next
    assert bf16.generate(prompt, max_new_tokens=1).text == lm.generate(prompt, max_new_tokens=1).text == "The"
    with pytest.raises(InvalidInputError, match="unknown dtype 'int3': use one of float32, bfloat16"):
        load_lm(tiny, "cpu", "raw", "int3")


def test_bfloat16_weights_warn_where_the_device_has_no_bfloat16_arithmetic(tmp_path, monkeypatch):
    """Asked for, bfloat16 weights are given (half the memory), with a warning where torch converts
    bfloat16 in software, which is slower than float32, not faster."""
    import warnings

    import torch

    from engine.errors import KGQAWarning
    from engine.models import device
    from tests.tiny_lm import make_tiny_lm

    tiny = make_tiny_lm(tmp_path / "tiny")
    monkeypatch.setattr(device, "native_bf16", lambda name: False)
    with pytest.warns(KGQAWarning, match=r"dtype bfloat16: this CPU has no bfloat16 arithmetic .*several times slower"):
        lm = load_lm(tiny, "cpu", "raw", "bfloat16")
    assert {p.dtype for p in lm.model.parameters()} == {torch.bfloat16}
    monkeypatch.setattr(device, "native_bf16", lambda name: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", KGQAWarning)
        load_lm(tiny, "cpu", None, "bfloat16")  # another cache entry: loaded again, with no warning


def test_bfloat16_arithmetic_is_found_as_the_cpus_instructions_say():
    from pathlib import Path

    import torch

    from engine.models.device import native_bf16

    lines = Path("/proc/cpuinfo").read_text().splitlines()
    flags = set(next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), []))
    if flags & {"avx512_bf16", "amx_bf16"}:  # x86 with bfloat16 instructions
        assert native_bf16("cpu")
    if "sse2" in flags and "avx512f" not in flags:  # x86 without AVX-512: no oneDNN bfloat16 kernels
        assert not native_bf16("cpu")
    assert native_bf16("cuda:0") == (torch.cuda.is_available() and torch.cuda.is_bf16_supported())


# ----------------------------------------------------------------------------- where a named model comes from
class _Hub(JsonHandler):
    """A stand-in hub that records every request and answers 404."""

    def do_HEAD(self):  # noqa: N802 — http.server's naming
        self.server.seen.append(f"HEAD {self.path}")  # type: ignore[attr-defined]
        self.send_response(404)
        self.end_headers()

    do_GET = do_HEAD  # noqa: N815


@pytest.fixture
def hub(monkeypatch) -> Iterator[list[str]]:
    """$HF_ENDPOINT at a local server that records what is asked of it."""
    from huggingface_hub import constants

    with serving(_Hub, seen=[]) as server:
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            monkeypatch.delenv(variable, raising=False)
        yield server.seen  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["kgqa-data/models/nope", "./nope", "~/kgqa-no-such-model", "nope.gguf", "models/nope"])
def test_a_model_path_that_is_not_there_fails_at_once_without_asking_the_hub(name, hub, tmp_path, monkeypatch):
    from pathlib import Path

    from engine.models.encoders import load_encoder, load_sequence_classifier

    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()  # a local directory: models/nope can only be a path in it
    expected = Path(name).expanduser().absolute()
    with pytest.raises(InvalidInputError) as caught:
        load_lm(name, "cpu")
    assert str(caught.value) == (
        f"language model {name!r}: there is no {expected}; train one first (`kgqa lm train … --out PATH`, or the "
        "method's own `train` command: see its README), or name an existing directory or .gguf file, a hub id "
        "(org/name), or leave --model out for the offline SmolLM2-135M-Instruct"
    )
    with pytest.raises(InvalidInputError, match=f"sentence encoder {name!r}: there is no .*leave the option out"):
        load_encoder(name, "cpu")
    with pytest.raises(InvalidInputError, match=f"sequence classifier {name!r}: there is no .*kgqa arg train-ranker"):
        load_sequence_classifier(name, "cpu")
    assert hub == []  # nothing was asked of the hub


def test_a_hub_id_loads_from_the_local_cache_only(hub, tmp_path, monkeypatch):
    from huggingface_hub import constants

    from engine.models.sources import ModelSource, model_source

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    with pytest.raises(InvalidInputError) as caught:
        load_lm("models/rog-planner", "cpu")
    message = str(caught.value)
    assert message.startswith(f"language model 'models/rog-planner': there is no {tmp_path / 'models' / 'rog-planner'}, "
                              "and as a hub id it is not in the local hub cache")
    assert "hf download models/rog-planner" in message and "kgqa lm train" in message
    # a hub model in the local cache loads from it alone
    (tmp_path / "cache" / "models--org--model").mkdir(parents=True)
    assert model_source("org/model", "language model", "get one") == ModelSource("org/model", {"local_files_only": True})
    assert hub == []  # nothing was asked of the hub


def test_the_command_line_names_a_model_that_is_not_there(kgqa_script, tmp_path):
    """`kgqa rog run --model models/rog-planner` before training: an error naming the path at once,
    not a minute of retries against a hub (pointed at a closed port here, so a request would fail)."""
    import os
    import subprocess

    from engine.servers.base import free_port

    kb, qa = tmp_path / "kb.txt", tmp_path / "qa_dev.txt"
    kb.write_text("Titanic|directed_by|James Cameron\n")
    qa.write_text("who directed [Titanic]\tJames Cameron\n")
    (tmp_path / "qa_dev_qtype.txt").write_text("movie_to_director\n")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{free_port()}", HF_HOME=str(tmp_path / "hf"))

    def kgqa(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(kgqa_script), *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    assert kgqa("load", str(kb), "--format", "metaqa", "--store", "store", "--no-progress").returncode == 0
    done = kgqa("rog", "run", "--dataset", str(qa), "--split", "all", "--store", "store", "--model", "models/rog-planner",
                "--out", "p.jsonl", "--no-progress")
    assert done.returncode == 2, done.stderr
    assert f"language model 'models/rog-planner': there is no {tmp_path / 'models' / 'rog-planner'}" in done.stderr
    assert "not in the local hub cache" in done.stderr and "kgqa lm train" in done.stderr


@pytest.mark.parametrize("template, says", [
    ("alpaca", "unknown prompt template 'alpaca': use chat, raw, llama2 or a string with {prompt}"),
    ('Answer as {"answer": …}: {prompt}', "holds a brace field other than {prompt}"),  # a KeyError at the first prompt
    ("{prompt} {0}", "holds a brace field other than {prompt}"),
    ("{prompt} }", "holds a brace field other than {prompt}"),
])
def test_a_prompt_template_a_model_cannot_prompt_with_is_refused_before_any_prompt(tiny, template, says):
    with pytest.raises(InvalidInputError, match=re.escape(says)):
        TransformersLM(tiny.model, tiny.tokenizer, "tiny", "cpu", template)
    with pytest.raises(InvalidInputError, match=re.escape(says)):  # kgqa lm train's settings, before the model loads
        SftConfig(template=template)
    doubled = TransformersLM(tiny.model, tiny.tokenizer, "tiny", "cpu", 'Answer as {{"answer": 1}}: {prompt}')
    assert doubled.tokenizer.decode(doubled.prompt_ids("Q")).endswith('Answer as {"answer": 1}: Q')  # a brace written twice is one
