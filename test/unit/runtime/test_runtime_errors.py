"""The errors module: API errors wrapped by status, the error tree."""

import json
from types import SimpleNamespace

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from gpuctrl.runtime import (
    AlreadyExists,
    ApiError,
    BadRequest,
    CacheNotStarted,
    Conflict,
    Forbidden,
    Gone,
    GpuctrlError,
    Invalid,
    NotFound,
    QueueShutDown,
    ServerError,
    TerminalError,
    TooManyRequests,
    Unauthorized,
    api_error,
)


def api_exception(status: int, http_reason: str, body: bytes | None) -> ApiException:
    exc = ApiException(status=status, reason=http_reason)
    exc.body = body
    return exc


def status(code: int, reason: str, message: str) -> dict[str, object]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason, "message": message}  # fmt: skip


def status_body(code: int, reason: str, message: str) -> bytes:
    return json.dumps(status(code, reason, message)).encode()


@pytest.mark.parametrize(
    ("status", "reason", "expected"),
    [
        (400, "BadRequest", BadRequest),
        (401, "Unauthorized", Unauthorized),
        (403, "Forbidden", Forbidden),
        (404, "NotFound", NotFound),
        (409, "Conflict", Conflict),
        (409, "AlreadyExists", AlreadyExists),
        (410, "Expired", Gone),
        (422, "Invalid", Invalid),
        (429, "TooManyRequests", TooManyRequests),
        (500, "InternalError", ServerError),
        (503, "ServiceUnavailable", ServerError),
        (418, "Teapot", ApiError),
    ],
    ids=lambda value: str(value) if not isinstance(value, type) else value.__name__,
)
def test_api_errors_are_wrapped_by_status(status: int, reason: str, expected: type) -> None:
    message = f'things "x" is {reason}'
    error = api_error(api_exception(status, "HTTP phrase", status_body(status, reason, message)))
    assert type(error) is expected
    assert (error.status, error.reason, error.message) == (status, reason, message)
    assert error.body is not None
    assert error.body["code"] == status
    assert str(error) == f"{status} {reason}: {message}"


@pytest.mark.parametrize(
    "body",
    [None, b"", b"<html>bad gateway</html>", b"\xff\xfe", b"[1, 2]"],
    ids=["none", "empty", "html", "not utf-8", "not an object"],
)
def test_a_body_without_a_status_keeps_the_http_reason(body: bytes | None) -> None:
    error = api_error(api_exception(502, "Bad Gateway", body))
    assert type(error) is ServerError
    assert (error.reason, error.message, error.body) == ("Bad Gateway", "", None)
    assert str(error) == "502 Bad Gateway"


@pytest.mark.parametrize(
    "body",
    [status(404, "NotFound", "gone fishing"), json.dumps(status(404, "NotFound", "gone fishing"))],
    ids=["decoded", "text"],
)
def test_a_status_from_elsewhere_is_read_too(body: object) -> None:
    """A watch ERROR event carries the Status already decoded."""
    error = api_error(SimpleNamespace(status=404, reason=None, body=body))
    assert isinstance(error, NotFound)
    assert (error.reason, error.message) == ("NotFound", "gone fishing")


def test_raise_from_keeps_the_client_error_as_the_cause() -> None:
    original = api_exception(409, "Conflict", status_body(409, "Conflict", "stale"))

    def update() -> None:
        try:
            raise original
        except ApiException as exc:
            raise api_error(exc) from exc

    with pytest.raises(Conflict) as caught:
        update()
    assert caught.value.__cause__ is original


@pytest.mark.parametrize(
    ("error", "parents"),
    [
        (QueueShutDown, (GpuctrlError,)),
        (CacheNotStarted, (GpuctrlError,)),
        (TerminalError, (GpuctrlError,)),
        (NotFound, (ApiError, GpuctrlError)),
        (AlreadyExists, (Conflict, ApiError, GpuctrlError)),
        (Gone, (ApiError, GpuctrlError)),
    ],
    ids=lambda value: getattr(value, "__name__", "parents"),
)
def test_error_tree(error: type, parents: tuple[type, ...]) -> None:
    assert all(issubclass(error, parent) for parent in parents)
