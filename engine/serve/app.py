"""The HTTP API over one store: :func:`create_app`.

| endpoint | what |
|---|---|
| ``POST /v1/ops/<operation>`` | one operation of the vocabulary (:mod:`engine.serve.ops`) |
| ``POST /v1/answer`` | questions answered by a registered method (:mod:`engine.serve.answering`) |
| ``GET /v1/methods`` | the methods and the options a request may set |
| ``GET /v1/health`` | whether the store answers (200, else 503); needs no token |
| ``GET /v1/stats`` | requests, errors and latencies per endpoint |
| ``GET /docs`` | the OpenAPI docs |

Every error is JSON, ``{"error": kind, "detail": message}``, with the status of
:func:`engine.serve.errors.error_status`. The store is used read-only: the operations only
read, and a raw query goes through the store's own guard, which refuses writes.
"""
from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from engine.errors import KGQAError, clipped
from engine.serve.access_log import AccessLog, Stats
from engine.serve.answer_routes import answer_router
from engine.serve.answering import Answerer
from engine.serve.auth import BearerFirst, bearer
from engine.serve.errors import RequestBodyError, RequestParameterError, error_body, error_status
from engine.serve.explorer import mount_explorer
from engine.serve.limits import BodyLimit, Workers
from engine.serve.ops import describe
from engine.serve.ops_routes import ops_router
from engine.serve.settings import ServeSettings
from engine.store import Store

#: the seconds ``/v1/health`` gives the store to answer (at most the server's --timeout)
HEALTH_TIMEOUT = 5.0
#: the id ``/v1/health`` asks the store to name: any answer, even "not there", shows it answers
_PROBE_ID = "kgqa-health-probe"

log = logging.getLogger("kgqa.serve")


def _error_response(error: BaseException) -> JSONResponse:
    return JSONResponse(error_body(error), error_status(error), headers=getattr(error, "headers", None) or None)


async def _engine_error(request: Request, error: Exception) -> JSONResponse:
    return _error_response(error)


async def _invalid_body(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    errors = error.errors()
    in_body = not errors or any(item.get("loc", ("body",))[:1] == ("body",) for item in errors)
    return _error_response((RequestBodyError if in_body else RequestParameterError)(describe(errors)))


def _unreadable(cause: BaseException) -> str:
    """Why a body that FastAPI could not parse is not JSON, and what to do."""
    if isinstance(cause, RecursionError):
        return ("the body is not valid JSON: its lists and objects nest too deep for this server to read "
                "(hundreds of levels); send a flatter body")
    if isinstance(cause, UnicodeDecodeError):
        return (f"the body is not UTF-8: byte 0x{cause.object[cause.start]:02x} at position {cause.start:,} "
                "starts no UTF-8 character; send JSON encoded as UTF-8")
    if "integer string conversion" in str(cause):
        return "the body is not valid JSON that this server reads: a number in it has more than 4,300 digits"
    return f"the body is not valid JSON ({clipped(str(cause), 200)})"


async def _http_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, HTTPException)
    cause = error.__cause__
    # FastAPI answers a body json.loads raised on with a bare 400; only a JSONDecodeError gets its 422
    if error.status_code == 400 and isinstance(cause, (RecursionError, ValueError)):
        return _error_response(RequestBodyError(_unreadable(cause)))
    return JSONResponse({"error": "HTTPError", "detail": str(error.detail)}, error.status_code, headers=error.headers)


async def _bug(request: Request, error: Exception) -> JSONResponse:
    # the path as a literal: a client's control characters (a terminal escape) are shown escaped
    log.error("%s %r failed", request.method, request.url.path, exc_info=error)
    return _error_response(error)


def create_app(store: Store, settings: ServeSettings | None = None) -> FastAPI:
    """The API over ``store`` within ``settings``. The caller keeps the store: it is not closed
    with the app."""
    settings = settings or ServeSettings()
    # a built method answers one request at a time: more answering threads than methods kept would only wait
    workers = Workers(settings.workers, settings.max_concurrency, answering=settings.method_cache)
    stats = Stats()
    answerer = Answerer(store, settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        workers.close()

    app = FastAPI(
        title="kgqa-engine",
        description="The operations of a knowledge-graph store, and the KGQA methods over it, read-only.",
        lifespan=lifespan,
    )
    app.state.store, app.state.settings, app.state.workers, app.state.stats = store, settings, workers, stats
    app.state.answerer = answerer
    auth = [Depends(bearer(settings.token))]
    app.include_router(ops_router(store, settings.bounds, workers), dependencies=auth)
    app.include_router(answer_router(answerer, workers), dependencies=auth)
    mount_explorer(app, store, settings, workers, auth)

    @app.get("/v1/health", tags=["server"], summary="whether the store answers: 200, else 503")
    async def health() -> JSONResponse:
        timeout = min(HEALTH_TIMEOUT, settings.timeout)
        try:
            # its own thread: a server busy with operations is alive, and says so
            await workers.run(lambda expires: store.names([_PROBE_ID], timeout=max(expires - time.monotonic(), 0.001)),
                              timeout, admit=False, health=True)
        except KGQAError as e:
            # health needs no token: with one set, why (it names the store's address) is for /v1/stats's readers
            detail = str(e) if settings.token is None else f"{type(e).__name__}: the store does not answer"
            log.warning("health: %s", e)
            return JSONResponse({"status": "unavailable", "dialect": store.dialect, "detail": detail}, 503)
        return JSONResponse({"status": "ok", "dialect": store.dialect})

    @app.get("/v1/stats", tags=["server"], summary="requests, errors and latencies per endpoint", dependencies=auth)
    async def server_stats() -> JSONResponse:
        limits: dict[str, Any] = {
            k: getattr(settings, k)
            for k in ("timeout", "max_rows", "max_body", "max_concurrency", "workers", "answer_timeout", "max_questions")
        }
        return JSONResponse({"store": store.uri, "dialect": store.dialect, "in_flight": workers.busy, "limits": limits,
                             **stats.report()})

    app.add_exception_handler(KGQAError, _engine_error)
    app.add_exception_handler(RequestValidationError, _invalid_body)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _bug)
    # the last added runs first: the log sees every answer, CORS headers go on a 413 too, and a
    # body is read only once its token is checked
    app.add_middleware(BodyLimit, max_body=settings.max_body)
    app.add_middleware(BearerFirst, token=settings.token, bodies_only=True)
    if settings.cors:
        app.add_middleware(
            CORSMiddleware, allow_origins=list(settings.cors), allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        )
    app.add_middleware(AccessLog, stats=stats)
    return app
