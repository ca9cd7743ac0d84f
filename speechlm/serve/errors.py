"""Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}` with a 4xx or 5xx status."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

log = logging.getLogger("speechlm.serve")


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        code: str,
        param: str | None = None,
        type: str | None = None,
        headers: dict | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.type = type or ("server_error" if status >= 500 else "invalid_request_error")
        self.headers = headers


def error_response(err: APIError) -> JSONResponse:
    body = {"error": {"message": err.message, "type": err.type, "param": err.param, "code": err.code}}
    return JSONResponse(body, status_code=err.status, headers=err.headers)


def install(app: FastAPI) -> None:
    """Every error the app answers, in OpenAI's shape: ours, Starlette's (404 route, 405 method), FastAPI's
    validation, and anything unexpected (a 500 that names no internals; the traceback goes to the log)."""

    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError):
        return error_response(exc)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(APIError(exc.status_code, str(exc.detail), code, headers=exc.headers))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        param = ".".join(str(x) for x in first.get("loc", ())[1:]) or None
        return error_response(APIError(400, first.get("msg", "invalid request"), "invalid_request", param))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception):
        log.exception("internal error on %s %s", request.method, request.url.path)
        return error_response(APIError(500, "internal server error (see the server's log)", "internal_error"))
