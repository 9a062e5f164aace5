"""The methods over OpenAI-compatible model servers: the client's completions route and its
scoring of given text against a canned server shaped like vLLM's replies (and one that ignores
``n``, ``echo`` and ``logprobs`` as ``transformers serve`` does), RoG's refusal of a server
planner in the constrained modes, and a real ``transformers serve`` process on the offline
SmolLM2 (:mod:`tests.model_server`): greedy generations, and RoG end to end, the same as the
model in process."""
from __future__ import annotations

import re
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from engine.errors import InvalidInputError, KGQAError, UnsupportedOperationError
from engine.graph import Triple
from engine.methods import registry
from engine.methods.ldr.scoring import OptionScorer
from engine.methods.spec import Models, make_config
from engine.models.loading import load_lm
from engine.models.openai_lm import OpenAIChatLM, completion_format, split_server_name
from engine.servers.base import ServerUnavailable
from loaders.questions import Question
from tests.conftest import missing
from tests.http_stub import JsonHandler, serving

KB = [
    ("Titanic", "directed_by", "James Cameron"),
    ("Avatar", "directed_by", "James Cameron"),
    ("Titanic", "starred_actors", "Leonardo DiCaprio"),
    ("Inception", "starred_actors", "Leonardo DiCaprio"),
    ("Inception", "directed_by", "Christopher Nolan"),
    ("Inception", "has_genre", "Science Fiction"),
]
QUESTIONS = [
    Question("1", "who directed [Titanic]", [], ["Titanic"], []),
    Question("2", "what movies did [Christopher Nolan] direct", [], ["Christopher Nolan"], []),
    Question("3", "which genre is [Inception]", [], ["Inception"], []),
]
#: SmolLM2-135M-Instruct's chat format written out, for the completions route
SMOLLM2_FORMAT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n{answer}<|im_end|>"
)


# ----------------------------------------------------------------------------- a canned server
def _tokens(text: str) -> list[str]:
    """The canned server's tokenizer: the end marker, runs of spaces with the word after them."""
    return re.findall(r"<\|im_end\|>|\s*[^\s<]+|\s+|<", text)


class _Canned(JsonHandler):
    """Chat and legacy completions. ``server.plain`` answers as ``transformers serve`` does:
    one choice whatever ``n`` asks, no log-probabilities, no echo. Otherwise an echoed prompt
    comes back with each token's log-probability (-len/10; the first token none) and offset,
    then one generated token, as vLLM answers."""

    def do_POST(self) -> None:  # noqa: N802 — http.server's naming
        body = self.read_json()
        server = self.server
        server.requests.append((self.path, body))  # type: ignore[attr-defined]
        plain = server.plain  # type: ignore[attr-defined]
        if "delay" in body.get("prompt", ""):
            time.sleep(1.0)  # an early prompt answered last: the client keeps the order
        n = 1 if plain else body.get("n", 1)
        if self.path == "/v1/chat/completions":
            choices = [{"index": i, "message": {"role": "assistant", "content": f" answer {len(server.requests)}"}}
                       for i in range(n)]
        elif body.get("echo") and body.get("logprobs") is not None and not plain:
            tokens = _tokens(body["prompt"]) + [" X"]
            offsets = [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
            logprobs = [None] + [-len(t) / 10 for t in tokens[1:]]
            choices = [{"index": 0, "text": body["prompt"] + " X",
                        "logprobs": {"tokens": tokens, "token_logprobs": logprobs, "text_offset": offsets}}]
        else:
            choices = [{"index": i, "text": f" {body['prompt'][-8:]} done "} for i in range(n)]
        self.send_json(200, {"id": "x", "choices": choices, "usage": {"prompt_tokens": 7, "completion_tokens": 2}})


@pytest.fixture
def canned() -> Iterator[ThreadingHTTPServer]:
    with serving(_Canned, requests=[], plain=False) as server:
        yield server


def _client(server: ThreadingHTTPServer, template: str | None = None) -> OpenAIChatLM:
    return OpenAIChatLM("m", f"http://127.0.0.1:{server.server_address[1]}/v1", template=template, retry_wait=0.01, timeout=5)


def test_a_template_sends_generations_to_completions_written_by_the_client(canned):
    lm = _client(canned, "<s>{prompt}\n{answer}<|im_end|>")
    g = lm.generate("Q?", max_new_tokens=5)
    path, body = canned.requests[0]
    assert path == "/v1/completions" and body["prompt"] == "<s>Q?\n" and body["max_tokens"] == 5 and "messages" not in body
    assert g.text == "<s>Q?\n done" and (g.prompt_tokens, g.completion_tokens) == (7, 2)
    assert lm.tokens.snapshot() == (7, 2, 0)  # the server's usage
    assert _client(canned, "raw").generate("Q?").text == "Q? done"
    assert _client(canned).url.endswith("/v1/chat/completions") and _client(canned, "chat").format is None


def test_completions_score_the_continuation_and_the_end_of_the_answer(canned):
    lm = _client(canned, "<s>{prompt}\n{answer}<|im_end|>")
    scores = lm.score_batch("Q?", ["New York", "Paris"], eos=True)
    # "\nNew" spans the prompt's last character and the option's first: it counts for the option;
    # the generated " X" does not
    assert scores == [pytest.approx([-0.4, -0.5, -1.0]), pytest.approx([-0.6, -1.0])]
    path, body = canned.requests[0]
    assert path == "/v1/completions" and body["echo"] is True and body["max_tokens"] == 1
    assert {b["prompt"] for _, b in canned.requests} == {"<s>Q?\nNew York<|im_end|>", "<s>Q?\nParis<|im_end|>"}
    assert lm.tokens.snapshot() == (14, 4, 0)  # a request per option, each with its usage
    assert lm.score_batch("Q?", ["Paris"]) == [pytest.approx([-0.6])]
    # a round of prompts: every continuation of every prompt one request, answers in order
    assert lm.score_many([("Q?", ["Paris"]), ("Q?", []), ("Q?", ["New York", "Paris"])], eos=True) == [[scores[1]], [], scores]
    assert [t.token for t in lm.token_logprobs("Q?", "New York")] == ["\nNew", " York"]
    assert lm.score("Q?", ["Paris"]) == [pytest.approx(-0.6)]
    assert lm.score_batch("Q?", []) == []


def test_scoring_is_refused_where_the_route_or_the_server_cannot_and_ldr_falls_back(canned):
    with pytest.raises(UnsupportedOperationError, match="--prompt-template"):
        _client(canned).score_batch("Q?", ["a", "b"])  # the chat route
    with pytest.raises(UnsupportedOperationError, match=r"after \{answer\}"):
        _client(canned, "<s>{prompt}\n").score_batch("Q?", ["a", "b"], eos=True)
    canned.plain = True  # echo and logprobs ignored, as transformers serve does
    lm = _client(canned, "{prompt}{answer}<|im_end|>")
    with pytest.raises(UnsupportedOperationError, match="does not echo"):
        lm.score_batch("Q?", ["a", "b"], eos=True)
    scorer = OptionScorer(lm)  # LDR chooses by a generated answer instead
    assert scorer("Q?", ["Q? done", "b"]).index == 0 and scorer.mode == "choice"


def test_beam_search_asks_again_where_the_server_returns_fewer_than_n(canned):
    canned.plain = True
    beams = _client(canned).beam_search("q", num_beams=3)
    assert len(canned.requests) == 3 and [b["n"] for _, b in canned.requests] == [3, 2, 1]
    assert len(beams) == 3 and len({b.text for b in beams}) == 3
    with pytest.raises(UnsupportedOperationError, match="token by token"):
        _client(canned).beam_search_batch(["q"], allowed_tokens=[lambda generated: [0]])


def test_a_batch_is_requested_concurrently_and_answered_in_order(canned):
    lm = _client(canned, "raw")
    started = time.monotonic()
    texts = [g.text for g in lm.generate_batch(["delay 1", "b", "delay 2", "d"], stop=lambda text: False)]
    assert texts == ["delay 1 done", "b done", "delay 2 done", "d done"]
    assert time.monotonic() - started < 1.8  # the two delays overlapped (one after the other: 2 s)
    with pytest.raises(ValueError, match="2 stop rules for 4 prompts"):
        lm.generate_batch(["a", "b", "c", "d"], stop=[None, None])


def test_server_names_and_templates_are_read_or_refused_clearly():
    assert split_server_name("openai:org/m@dev@http://h:1/v1") == ("org/m@dev", "http://h:1/v1")
    assert split_server_name("openai:gpt-4o-mini") == ("gpt-4o-mini", None)
    assert split_server_name("openai:m@https://u:p@h/v1") == ("m", "https://u:p@h/v1")
    assert completion_format("raw") == ("{prompt}", None)
    assert completion_format("llama2")[0].endswith("{prompt} [/INST]")
    assert completion_format("A {prompt} B {answer} END") == ("A {prompt} B ", " END")
    with pytest.raises(InvalidInputError, match="prompt template 'plain' for a model server"):
        completion_format("plain")
    lm = load_lm("openai:m@http://127.0.0.1:9/v1", None, "raw")
    assert isinstance(lm, OpenAIChatLM) and lm.url == "http://127.0.0.1:9/v1/completions"


def test_rog_refuses_a_server_planner_in_the_constrained_modes(make_store):
    store = make_store("oxigraph", [Triple(*t) for t in KB])
    spec = registry.get("rog")
    server = "openai:m@http://127.0.0.1:9/v1"  # nothing listens: the refusal comes before any request
    for mode in ("grounded", "vocabulary"):
        with pytest.raises(InvalidInputError, match=f"RoG's {mode} planning .*--reasoner {re.escape(server)}"):
            spec.build(make_config(spec.config, {"model": server, "plan_mode": mode}), store, Models())
    method = spec.build(make_config(spec.config, {"model": server, "plan_mode": "free"}), store, Models())
    assert method.planner.name == "openai:m@http://127.0.0.1:9/v1"


# ----------------------------------------------------------------------------- a real transformers serve
@pytest.fixture(scope="module")
def lm():
    return load_lm()


@pytest.fixture(scope="module")
def model_server(lm, tmp_path_factory):
    from tests.model_server import start

    try:
        server = start(tmp_path_factory.mktemp("model-server"), lm)
    except ServerUnavailable as e:
        missing(f"a real model server is unavailable: {e}")
    yield server
    server.stop()


PROMPTS = ["What is the capital of France? Answer in one word.", "Name a colour.", "Who wrote Hamlet?"]


@pytest.mark.model
def test_the_server_generates_greedily_what_the_model_in_process_does(lm, model_server):
    chat = load_lm(model_server.name)
    assert isinstance(chat, OpenAIChatLM)
    served = chat.generate_batch(PROMPTS, max_new_tokens=16)
    before = lm.tokens.snapshot()
    local = [lm.generate(p, max_new_tokens=16) for p in PROMPTS]
    assert [g.text for g in served] == [g.text for g in local]
    # the server's usage counts the tokens the model in process counts
    after = lm.tokens.snapshot()
    assert chat.tokens.snapshot() == (after[0] - before[0], after[1] - before[1], 0)
    # the server wrapped each prompt in the same chat template
    assert [g.prompt_tokens for g in served] == [len(lm.prompt_ids(p)) for p in PROMPTS]
    # the completions route, the chat format written out by the client, reads the same tokens
    written = load_lm(model_server.name, None, SMOLLM2_FORMAT)
    assert [g.text for g in written.generate_batch(PROMPTS[:1], max_new_tokens=16)] == [local[0].text]
    # transformers serve ignores echo and logprobs: given text is not scored, LDR would choose by generating
    with pytest.raises(UnsupportedOperationError, match="does not echo"):
        written.score_batch(PROMPTS[0], ["Paris", "Lyon"], eos=True)
    assert len(chat.beam_search(PROMPTS[1], num_beams=2, max_new_tokens=8)) in (1, 2)  # sampled, asked for again


@pytest.mark.model
def test_rog_reasons_over_the_server_as_in_process(lm, model_server, make_store):
    """RoG with the planner in process (grounded plans need token constraints) and the reasoner
    over the server: the same plans, reasoning outputs and answers as with both in process
    (greedy decoding of the same float32 weights; the server decodes one prompt at a time, the
    engine a batch, which the engine keeps equal to one by one)."""
    store = make_store("oxigraph", [Triple(*t) for t in KB])
    spec = registry.get("rog")
    # the planner the server serves (the offline model), reasoning as in the paper
    settings = {"model": "SmolLM2-135M-Instruct", "answer_mode": "llm", "k": 1, "max_hops": 1, "answer_tokens": 16,
                "batch_size": 3}
    served = spec.build(make_config(spec.config, {**settings, "reasoner": model_server.name}), store, Models())
    assert served.reasoner.name == model_server.name
    local = spec.build(make_config(spec.config, settings), store, Models())
    over_http, in_process = served.answer(QUESTIONS), local.answer(QUESTIONS)
    assert [p.trace.plans for p in over_http] == [p.trace.plans for p in in_process]
    assert [p.trace.output for p in over_http] == [p.trace.output for p in in_process]
    assert [p.answers for p in over_http] == [p.answers for p in in_process]
    assert all(p.trace.output for p in over_http)
    with pytest.raises(KGQAError, match="HTTP 400"):  # a model the server does not serve is a clear error
        OpenAIChatLM("other", model_server.base_url, retries=1).generate("q", max_new_tokens=2)
