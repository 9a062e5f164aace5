"""``POST /v1/answer`` (questions answered by a registered method) and ``GET /v1/methods``
(the methods and the options a request may set)."""
from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from engine.serve.answering import AnswerRequest, Answerer, describe_methods
from engine.serve.limits import Workers
from engine.serve.settings import bounded_timeout


def answer_router(answerer: Answerer, workers: Workers) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["methods"])
    most = answerer.settings.answer_timeout

    @router.post("/answer", summary="answer a question or a batch with a registered method: predictions, trace, seconds")
    async def answer(body: AnswerRequest) -> JSONResponse:
        deadline = bounded_timeout(body.timeout, most)
        return JSONResponse(await workers.run(lambda expires: answerer.answer(body, expires), deadline, answering=True))

    @router.get("/methods", summary="the registered methods, their options, and which a request may set")
    async def methods() -> JSONResponse:
        return JSONResponse(describe_methods())

    return router
