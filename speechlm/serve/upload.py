"""Reading a request's multipart body: bounded in size and in patience, and read as RFC 7578 and
RFC 2046 say.

- The upload limit (`--max-upload-mb`) counts the file's bytes, not the body's: a file of exactly the
  limit is taken. The body may exceed it by the other fields (`MAX_FIELDS` of at most `MAX_FIELD_BYTES`
  each) and the part headers, `BODY_SLACK` in all; Content-Length beyond that is refused before a byte
  is read.
- A client that stops sending for `--read-timeout` seconds gets 408 `request_timeout`: a stalled body
  holds no model slot meanwhile (app.py takes the slot once the body is in), and is dropped.
- The body is complete when python-multipart has parsed the closing delimiter (its `on_end`), wherever
  that falls: an epilogue after it, of any length, is allowed (RFC 2046 section 5.1.1) and ignored.
  A body that ends before it is a 400 `truncated_upload`.
- A file part named only by `filename*=UTF-8''...` (RFC 5987/2231; RFC 7578 tells senders not to use it,
  but browsers' and libraries' encoders do for non-ASCII names) is a file, as a part with `filename` is.
"""

from __future__ import annotations

import asyncio
from email.message import Message

from python_multipart.multipart import parse_options_header
from starlette.datastructures import FormData, Headers
from starlette.formparsers import FormParser, MultiPartException, MultiPartParser
from starlette.requests import ClientDisconnect

from speechlm.serve.errors import APIError

MAX_FIELDS = 20
MAX_FIELD_BYTES = 64 * 1024  # a form field other than the file (a prompt): more is no transcription request
BODY_SLACK = MAX_FIELDS * MAX_FIELD_BYTES + 512 * 1024  # the fields and every part's headers


class _TooLarge(Exception):
    pass


def _extended_filename(disposition: bytes) -> str | None:
    """The file name of a Content-Disposition, `filename*` (RFC 2231) decoded, by the standard library's
    reader of MIME headers; None without one."""
    msg = Message()
    msg["content-disposition"] = disposition.decode("latin-1")
    return msg.get_filename()


class FileFormParser(MultiPartParser):
    """Starlette's multipart parser that counts the file's bytes against `file_limit`, takes a part
    named by `filename*` for a file, and records whether the closing delimiter came."""

    def __init__(self, headers: Headers, stream, file_limit: int):
        super().__init__(headers, stream, max_files=1, max_fields=MAX_FIELDS, max_part_size=MAX_FIELD_BYTES)
        self.file_limit = file_limit
        self.file_bytes = 0
        self.closed = False

    def on_headers_finished(self) -> None:
        disposition = self._current_part.content_disposition or b""
        _, options = parse_options_header(disposition)
        if b"filename" not in options and (name := _extended_filename(disposition)) is not None:
            quoted = name.replace("\\", "\\\\").replace('"', '\\"').encode()
            self._current_part.content_disposition = disposition + b'; filename="' + quoted + b'"'
        super().on_headers_finished()

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._current_part.file is not None:
            self.file_bytes += end - start
            if self.file_bytes > self.file_limit:
                raise _TooLarge
        super().on_part_data(data, start, end)

    def on_end(self) -> None:
        self.closed = True


async def _next_message(receive, timeout: float, cut: asyncio.Event) -> dict:
    """The client's next message, or 408 if it sends nothing for `timeout` s, or 503 if the server
    is cut short (shutdown) meanwhile."""
    message = asyncio.ensure_future(receive())
    stop = asyncio.ensure_future(cut.wait())
    try:
        done, _ = await asyncio.wait({message, stop}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if message in done:
        return message.result()
    message.cancel()
    if cut.is_set():
        raise APIError(503, "the server shut down while the upload was arriving; send it again", "shutting_down")
    raise APIError(
        408,
        f"the upload stalled: nothing arrived for {timeout:g} s (the server's --read-timeout)",
        "request_timeout",
        "file",
    )


async def read_form(receive, headers: Headers, file_limit: int, timeout: float, cut: asyncio.Event) -> FormData:
    """The multipart form of a request: 413 for a file over `file_limit` bytes, 408 for a stalled body,
    400 for a malformed or truncated one."""
    too_large = APIError(
        413,
        f"the file is larger than the server's upload limit ({file_limit / 2**20:g} MB; --max-upload-mb)",
        "file_too_large",
        "file",
    )
    body_limit = file_limit + BODY_SLACK
    length = headers.get("content-length")
    if length and length.isdigit() and int(length) > body_limit:
        raise too_large
    content_type, _ = parse_options_header(headers.get("content-type", ""))

    async def chunks():
        seen = 0
        while True:
            message = await _next_message(receive, timeout, cut)
            if message["type"] == "http.disconnect":
                raise ClientDisconnect
            body = message.get("body", b"")
            seen += len(body)
            if seen > body_limit:
                raise _TooLarge
            if body:
                yield body
            if not message.get("more_body", False):
                return

    if content_type == b"multipart/form-data":
        parser = FileFormParser(headers, chunks(), file_limit)
    else:  # no file can be in it: fields.parse says what is missing
        parser = FormParser(headers, chunks(), max_fields=MAX_FIELDS, max_part_size=MAX_FIELD_BYTES)
        parser.closed = True
    try:
        form = await parser.parse()
    except _TooLarge:
        raise too_large from None
    except MultiPartException as e:
        raise APIError(400, f"could not read the multipart form: {e.message}", "invalid_multipart") from None
    if not parser.closed:  # python-multipart takes a body that stops short as a form without its last part
        await form.close()
        raise APIError(
            400, "the multipart body ends before its closing boundary (a truncated upload)", "truncated_upload", "file"
        )
    return form
