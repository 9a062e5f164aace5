"""``POST /v1/ops/<operation>``: one route per operation of :data:`engine.serve.ops.OPERATIONS`,
its body checked by the operation's own model (so ``/docs`` shows each one)."""
# No ``from __future__ import annotations``: each handler's body annotation is the operation's
# model class, which FastAPI reads from the function itself.
from collections.abc import Awaitable, Callable

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from engine.serve.limits import Workers
from engine.serve.ops import OPERATIONS, Operation, operation, run_operation
from engine.serve.settings import Bounds, bounded_timeout
from engine.store import Store


def _handler(op: Operation, store: Store, bounds: Bounds, workers: Workers) -> Callable[..., Awaitable[JSONResponse]]:
    async def handler(body: op.request) -> JSONResponse:  # type: ignore[name-defined]
        deadline = bounded_timeout(body.timeout, bounds.timeout)
        return JSONResponse(await workers.run(lambda expires: run_operation(store, op.name, body, bounds, expires), deadline))

    handler.__name__ = op.name
    return handler


async def _unknown(operation_name: str) -> None:
    operation(operation_name)  # raises, naming the operations there are


def ops_router(store: Store, bounds: Bounds, workers: Workers) -> APIRouter:
    router = APIRouter(prefix="/v1/ops", tags=["operations"])
    for op in OPERATIONS.values():
        router.add_api_route(
            f"/{op.name}", _handler(op, store, bounds, workers), methods=["POST"], summary=op.summary,
            response_class=JSONResponse,
        )
    router.add_api_route("/{operation_name}", _unknown, methods=["POST"], include_in_schema=False)
    return router
