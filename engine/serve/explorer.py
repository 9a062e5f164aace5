"""The question explorer: one page at ``/explorer`` that answers a question with a registered
method (``POST /v1/answer``) and draws how it was answered, and the endpoints it reads.

| endpoint | what |
|---|---|
| ``GET /explorer`` | the page (its script and the vendored cytoscape under ``/explorer/static``) |
| ``GET /v1/explorer/sources`` | the question sets it offers: the datasets found, and the server's ``--questions`` file |
| ``GET /v1/explorer/questions`` | questions of one set, with their gold answers and gold path |
| ``POST /v1/explorer/graph`` | a record of ``/v1/answer`` as a graph (:mod:`engine.serve.trace_graph`) |

A request names a question set, never a file: the server reads only the datasets directory and
the file its operator gave. The page needs no network but this server.
"""
from __future__ import annotations

import base64
import functools
import hashlib
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Query
from fastapi.params import Depends
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from engine.errors import InvalidInputError
from engine.serve import trace_graph
from engine.serve.json_walk import walk
from engine.serve.limits import Workers
from engine.serve.ops import MAX_ITEMS, check_texts, run_operation
from engine.serve.settings import ServeSettings, bounded_timeout
from engine.store import MAX_PATH_HOPS, Store
from loaders.datasets import BUILT_DATASETS, DATASETS, built_dir, data_dir, load_dataset
from loaders.questions import Question, metaqa_relation_path

STATIC = Path(__file__).parent / "static"
#: the most ids whose names one graph looks up
MAX_NAMED = 2000
#: the most gold-path walks asked of the store
GOLD_WALK_LIMIT = 200
#: the most items of any list in a record drawn (answers, prediction, topic, a trace's paths, …)
MAX_RECORD_ITEMS = 1000
#: the record's fields that list ids or names
RECORD_LISTS = ("topic", "answers", "answer_ids", "prediction", "prediction_ids")
#: the one rule cytoscape adds to the page as a <style> element (the page's policy allows it by its hash)
CYTOSCAPE_RULE = ".__________cytoscape_container { position: relative; }"
#: the page runs only this server's own files (a name in the store that the page ever showed as HTML
#: would not run): no inline script or style but cytoscape's rule, no framing, no sniffing
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; connect-src 'self'; img-src 'self' data:; "
        f"style-src 'self' 'sha256-{base64.b64encode(hashlib.sha256(CYTOSCAPE_RULE.encode()).digest()).decode()}'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


class GraphRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    method: str = Field(description="the method that wrote the record (it picks the reader of its trace)")
    record: dict[str, Any] = Field(description="one of /v1/answer's predictions, or a line of `kgqa <method> run`'s output")
    path: list[str] | None = Field(None, max_length=MAX_ITEMS, description="the gold relation path from the topic entities, where the dataset has one")
    path_forward: list[bool] | None = Field(None, max_length=MAX_ITEMS, description="per hop of path: whether it goes the stored way")
    timeout: float | None = Field(None, gt=0, description="seconds the store lookups may take (default and most: the server's)")


def sources(settings: ServeSettings) -> list[str]:
    """The question sets on offer: the server's ``--questions`` file, then each named dataset whose file is there."""
    found = [Path(settings.questions).name] if settings.questions else []
    try:
        data = data_dir()
        found += [name for name, file in DATASETS.items() if (data / file).is_file()]
    except InvalidInputError:
        pass  # no datasets directory: only the server's own file
    found += [name for name, (file, _) in BUILT_DATASETS.items() if (built_dir() / file).is_file()]
    return found


@functools.lru_cache(maxsize=4)
def _questions(source: str) -> list[Question]:
    return load_dataset(source)


def gold_path(q: Question) -> tuple[list[str] | None, list[bool] | None]:
    """The question's gold relation path and its directions: the dataset's own, or MetaQA's from its question type."""
    if q.path:
        return q.path, q.path_forward
    if q.qtype:
        try:
            hops = metaqa_relation_path(q.qtype)
        except InvalidInputError:
            return None, None
        return [r for r, _ in hops], [d == "out" for _, d in hops]
    return None, None


def question_json(q: Question) -> dict[str, Any]:
    path, forward = gold_path(q)
    return {"id": q.id, "question": q.question, "topics": q.topic_entities, "answers": q.answers,
            "answer_ids": q.answer_entities, "hops": q.hops, "qtype": q.qtype, "path": path, "path_forward": forward}


def list_questions(settings: ServeSettings, source: str, search: str, offset: int, limit: int) -> dict[str, Any]:
    offered = sources(settings)
    if source not in offered:
        raise InvalidInputError(f"unknown question set {source!r}: use one of {', '.join(offered) or '(none here)'}")
    given = settings.questions if settings.questions and source == Path(settings.questions).name else source
    found = _questions(str(given))
    if search:
        folded = search.casefold()
        found = [q for q in found if folded in q.question.casefold()]
    return {"source": source, "total": len(found), "offset": offset,
            "questions": [question_json(q) for q in found[offset:offset + limit]]}


def check_record(record: dict[str, Any]) -> None:
    """Refuse a record whose ids or answers are not lists (a text would be drawn letter by
    letter), or with a list of more than :data:`MAX_RECORD_ITEMS` items anywhere in it, naming
    the field: the graph's work grows with them, and no method's record holds so many."""
    for key in RECORD_LISTS:
        if record.get(key) is not None and not isinstance(record[key], list):
            raise InvalidInputError(f"record.{key}: a {type(record[key]).__name__}; send a list, as /v1/answer writes it")
    for where, _, value in walk(record, "record"):
        if isinstance(value, list) and len(value) > MAX_RECORD_ITEMS:
            raise InvalidInputError(
                f"{where}: {len(value):,} items; the explorer draws a record whose lists hold at most "
                f"{MAX_RECORD_ITEMS:,}: send fewer"
            )


def graph(store: Store, settings: ServeSettings, request: GraphRequest, expires: float | None = None) -> dict[str, Any]:
    """The record's graph, its gold path walked on the store and its ids named, by ``expires``
    (a :func:`time.monotonic` instant, where given)."""
    # before any work: the answer is written as UTF-8
    check_texts({"method": request.method, "record": request.record, "path": request.path})
    bounds = settings.bounds
    record = request.record
    check_record(record)
    try:
        reading = trace_graph.read(request.method, record)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:
        raise InvalidInputError(f"record: not a {request.method} record as /v1/answer writes it ({e})") from None
    topics = [t for t in record.get("topic") or [] if isinstance(t, str)]
    paths: list[dict[str, Any]] = []
    if request.path and topics:
        if len(request.path) > MAX_PATH_HOPS:
            raise InvalidInputError(f"path: {len(request.path)} hops; a gold path has 1 to {MAX_PATH_HOPS}")
        body = {"seeds": topics, "path": request.path, "limit": min(GOLD_WALK_LIMIT, bounds.max_rows),
                "timeout": request.timeout}
        paths = run_operation(store, "follow_paths", body, bounds, expires)["paths"]
    gold_ids = {a for a in record.get("answer_ids") or [] if isinstance(a, str)}
    ids = trace_graph.ids_to_name(reading, record, [trace_graph.path_walk(p) for p in paths])[:MAX_NAMED]
    try:
        names = run_operation(store, "names", {"ids": ids, "timeout": request.timeout}, bounds, expires)["names"] if ids else {}
    except InvalidInputError:
        names = {}  # a record naming something that cannot be an id: shown as written
    gold_names = {a for a in record.get("answers") or [] if isinstance(a, str)}
    gold = trace_graph.gold_walks(paths, request.path_forward, gold_ids, gold_names, names)
    try:
        return trace_graph.view(request.method, record, names, gold, reading)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:
        raise InvalidInputError(f"record: not a {request.method} record as /v1/answer writes it ({e})") from None


def explorer_router(store: Store, settings: ServeSettings, workers: Workers) -> APIRouter:
    router = APIRouter(prefix="/v1/explorer", tags=["explorer"])

    @router.get("/sources", summary="the question sets the explorer offers")
    async def list_sources() -> JSONResponse:
        return JSONResponse({"sources": await workers.run(lambda _: sources(settings), settings.timeout)})

    @router.get("/questions", summary="questions of a set, with their gold answers and gold path")
    async def questions(
        source: str = Query(description="a question set GET /v1/explorer/sources lists"),
        search: str = Query("", max_length=200, description="only questions whose text holds this (any case)"),
        offset: int = Query(0, ge=0), limit: int = Query(20, ge=1, le=200),
    ) -> JSONResponse:
        # a dataset is read once, then kept: the first call may take longer than an operation's deadline
        answer = await workers.run(lambda _: list_questions(settings, source, search, offset, limit), settings.answer_timeout)
        return JSONResponse(answer)

    @router.post("/graph", summary="a record of /v1/answer as a graph: topic, explored, chosen, answers, gold")
    async def draw(body: GraphRequest) -> JSONResponse:
        deadline = bounded_timeout(body.timeout, settings.timeout)
        return JSONResponse(await workers.run(lambda expires: graph(store, settings, body, expires), deadline))

    return router


def mount_explorer(app: FastAPI, store: Store, settings: ServeSettings, workers: Workers, auth: list[Depends]) -> None:
    """Serve the page (open: it holds no data) and its endpoints (behind the token, when there is one)."""
    app.include_router(explorer_router(store, settings, workers), dependencies=auth)
    page = STATIC / "explorer.html"

    @app.get("/explorer", include_in_schema=False)
    async def explorer_page() -> FileResponse:
        return FileResponse(page, media_type="text/html", headers=PAGE_HEADERS)

    app.mount("/explorer/static", _PageFiles(directory=STATIC), name="explorer-static")


class _PageFiles(StaticFiles):
    """The page's files, with its headers (the page itself is one of them)."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers.update(PAGE_HEADERS)
        return response

