"""Shard sets at a URL (s3://, gs://, https://, anything fsspec opens): manifests and tars.

The plan needs only the manifest (fetched once per loader); the tars are streamed by the
DataLoader workers, or downloaded whole into a local cache folder with a size cap. Every request
has a timeout; a transient failure (connection refused or reset, timeout, 5xx) is retried with
exponential backoff and logged, resuming a tar at the byte it had reached; when the retries run
out the read fails with `StorageError` naming the object, which stops training (continuing would
train on padding). A missing object is a `FileNotFoundError` naming it: a missing manifest is a
config error, a missing tar is skipped and counted like a missing local tar.

Credentials come from the environment (AWS_* variables or ~/.aws for s3://, the provider's usual
chain elsewhere; AWS_ENDPOINT_URL points s3:// at another S3-compatible server), never from the
config, so they are never saved with a run. Shards at a URL are treated as immutable: the cache
keys on the URL alone.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(path: str) -> bool:
    return bool(_URL.match(str(path)))


def join(base: str, name: str) -> str:
    """`base`/`name` for a folder path or a URL (pathlib would fold "s3://" into "s3:/")."""
    return f"{base.rstrip('/')}/{name}" if is_url(base) else str(Path(base) / name)


class StorageError(OSError):
    """Storage stayed unreachable through every retry (the object may well exist)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:  # webdataset appends its stream and URL to .args on the way up
        return self.message


@dataclass(frozen=True)
class RemoteIO:
    """How shards at a URL are read (picklable: it travels into the DataLoader workers)."""

    retries: int = 5  # further attempts after a transient failure, per failure
    timeout_s: float = 60.0  # connect and per-read timeout of each request
    backoff_s: float = 1.0  # first wait; doubles per attempt, capped at 30 s, +-25% jitter
    cache_dir: str | None = None  # download whole tars here (None: stream them)
    cache_bytes: int = 0  # size cap of cache_dir; the least recently used tars go first

    @classmethod
    def from_config(cls, d) -> RemoteIO:
        return cls(
            retries=d.io_retries,
            timeout_s=d.io_timeout_s,
            backoff_s=d.io_backoff_s,
            cache_dir=d.cache_dir or None,
            cache_bytes=int(d.cache_max_gb * 2**30),
        )


DEFAULT = RemoteIO()


# --------------------------------------------------------------------------- filesystems


def _filesystem(url: str, io_: RemoteIO):
    """(fsspec filesystem, path) with this policy's timeouts and no hidden retry layers: the retries
    are ours, so they are logged and bounded (s3fs and botocore would each retry again inside)."""
    import fsspec

    protocol = url.split("://", 1)[0].lower()
    t = float(io_.timeout_s)
    if protocol in ("http", "https"):
        import aiohttp

        opts = {"client_kwargs": {"timeout": aiohttp.ClientTimeout(total=None, connect=t, sock_connect=t, sock_read=t)}}
    elif protocol in ("s3", "s3a"):
        opts = {
            "config_kwargs": {
                "connect_timeout": t,
                "read_timeout": t,
                "retries": {"mode": "standard", "max_attempts": 1},
            }
        }
    else:
        opts = {}
    fs, path = fsspec.core.url_to_fs(url, **opts)
    if protocol in ("s3", "s3a"):
        fs.retries = 1  # s3fs's own loop; this instance is ours alone (keyed on the options above)
    return fs, path


def _open(url: str, io_: RemoteIO):
    fs, path = _filesystem(url, io_)
    if url.split("://", 1)[0].lower() in ("http", "https"):
        # one streaming GET: random access needs Range support, which many servers lack, and
        # fs.open would first ask for the size (a request more, and it reports any failure there,
        # a refused connection included, as FileNotFoundError)
        from fsspec.asyn import sync
        from fsspec.implementations.http import HTTPStreamFile

        return HTTPStreamFile(fs, path, session=sync(fs.loop, fs.set_session), loop=fs.loop)
    return fs.open(path, "rb")


# --------------------------------------------------------------------------- retries


_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


def transient(exn: BaseException) -> bool:
    """Worth retrying: network trouble, timeouts, server-side (5xx) and throttling (429) errors."""
    if isinstance(exn, FileNotFoundError) and exn.__cause__ is not None:
        return transient(exn.__cause__)  # fsspec reports some failed requests as "not found"
    if isinstance(exn, (_PERMANENT, StorageError)):
        return False
    status = _status(exn)
    if isinstance(status, int) and 400 <= status < 500:
        return status in (408, 429)
    if isinstance(exn, (OSError, TimeoutError, ConnectionError)):
        return True
    # the HTTP clients' own exception trees (aiohttp.ClientError, botocore's) are not all OSErrors
    return type(exn).__module__.split(".")[0] in ("aiohttp", "botocore", "aiobotocore", "urllib3", "fsspec")


def _status(exn: BaseException) -> int | None:
    """The HTTP status of a failed request, where the error carries one (aiohttp, botocore)."""
    status = getattr(exn, "status", None) or getattr(exn, "code", None)
    if status is None:
        status = (
            (getattr(exn, "response", None) or {}).get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(getattr(exn, "response", None), dict)
            else None
        )
    return status if isinstance(status, int) else None


class _Retry:
    """One failure episode: wait, log, and give up with StorageError after `retries` attempts."""

    def __init__(self, url: str, io_: RemoteIO, what: str):
        self.url, self.io, self.what = url, io_, what
        self.attempt, self.t0 = 0, None

    def failed(self, exn: BaseException) -> None:
        if not transient(exn):
            raise exn
        if self.t0 is None:
            self.t0 = time.monotonic()
        self.attempt += 1
        if self.attempt > self.io.retries:
            raise StorageError(
                f"{self.url}: storage unreachable while {self.what}, after {self.attempt} attempts over "
                f"{time.monotonic() - self.t0:.1f} s (last error: {type(exn).__name__}: {exn})"
            ) from exn
        wait = min(30.0, self.io.backoff_s * 2 ** (self.attempt - 1)) * random.uniform(0.75, 1.25)
        log.warning(
            "%s: %s while %s; retry %d/%d in %.1f s",
            self.url,
            f"{type(exn).__name__}: {exn}",
            self.what,
            self.attempt,
            self.io.retries,
            wait,
        )
        time.sleep(wait)

    def succeeded(self) -> None:
        if self.attempt:
            log.warning("%s: %s again after %d retries", self.url, self.what, self.attempt)
        self.attempt, self.t0 = 0, None


class ResilientReader(io.RawIOBase):
    """A read-only stream of one object that survives transient failures: on an error it reopens
    the object and continues at the byte it had reached (seeking where the file object can,
    else reading up to it again)."""

    def __init__(self, url: str, io_: RemoteIO = DEFAULT):
        self.url, self.io = url, io_
        self.pos = 0
        self._f = None
        self._retry = _Retry(url, io_, "reading")
        while True:  # open now, so a missing object fails at open and names itself
            try:
                self._reopen()
                break
            except Exception as e:  # noqa: BLE001 - classified by _Retry
                self._retry.failed(_named(e, url))
        self._retry.succeeded()

    def _reopen(self) -> None:
        self._drop()
        f = _open(self.url, self.io)
        try:
            if self.pos:
                try:
                    f.seek(self.pos)
                    if f.tell() != self.pos:
                        raise io.UnsupportedOperation("seek")
                except (io.UnsupportedOperation, ValueError, NotImplementedError):
                    left = self.pos
                    while left:  # a streaming file: read up to where we were
                        chunk = f.read(min(left, 1 << 20))
                        if not chunk:
                            raise EOFError(f"{self.url} is shorter than the {self.pos} bytes read before") from None
                        left -= len(chunk)
        except BaseException:
            f.close()
            raise
        self._f = f

    def _drop(self) -> None:
        if self._f is not None:
            try:
                self._f.close()
            except Exception:  # noqa: BLE001 - the connection is already broken
                pass
            self._f = None

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while True:
            try:
                if self._f is None:
                    self._reopen()
                data = self._f.read(len(b))
                break
            except Exception as e:  # noqa: BLE001 - classified by _Retry
                self._drop()
                self._retry.failed(_named(e, self.url))
        self._retry.succeeded()
        n = len(data)
        b[:n] = data
        self.pos += n
        return n

    def close(self) -> None:
        self._drop()
        super().close()


def _named(exn: BaseException, url: str) -> BaseException:
    """A missing object's error names the URL (s3fs and the HTTP client name only the key or nothing)."""
    if isinstance(exn, FileNotFoundError) and not transient(exn):
        return FileNotFoundError(f"no such object: {url}")
    return exn


def open_shard(url: str, io_: RemoteIO = DEFAULT) -> io.BufferedReader:
    """A buffered stream of the tar at `url`, from the cache when `io_.cache_dir` is set."""
    if io_.cache_dir:
        for _ in range(2):
            local = cached(url, io_)
            if local is None:
                break
            try:
                return open(local, "rb")
            except FileNotFoundError:  # evicted by another process between the two steps
                continue
    return io.BufferedReader(ResilientReader(url, io_), buffer_size=1 << 20)


def read_bytes(url: str, io_: RemoteIO = DEFAULT) -> bytes:
    with ResilientReader(url, io_) as r:
        return b"".join(iter(lambda: r.read(8 << 20), b""))


# --------------------------------------------------------------------------- cache


def cache_name(url: str) -> str:
    digest = hashlib.sha1(url.encode()).hexdigest()[:16]
    return f"{digest}-{url.rstrip('/').rsplit('/', 1)[-1]}"


def cached(url: str, io_: RemoteIO) -> str | None:
    """Path of `url`'s copy in the cache, downloaded now if absent; None when the object alone is
    larger than the cap (then it is streamed). Several workers and ranks may share the folder:
    a copy appears whole (written aside, then renamed) and a reader keeps a file that is evicted."""
    root = Path(io_.cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    dest = root / cache_name(url)
    if dest.is_file():
        os.utime(dest)  # recently used
        return str(dest)
    tmp = root / f".{dest.name}.{os.getpid()}.{random.randrange(1 << 30):x}.part"
    try:
        with ResilientReader(url, io_) as src, open(tmp, "wb") as out:
            while True:
                chunk = src.read(8 << 20)
                if not chunk:
                    break
                out.write(chunk)
                if io_.cache_bytes and out.tell() > io_.cache_bytes:
                    log.warning(
                        "%s is larger than the shard cache (%d bytes): streamed, not cached", url, io_.cache_bytes
                    )
                    return None
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    if io_.cache_bytes:
        evict(root, io_.cache_bytes, keep=dest)
    return str(dest)


def evict(root: Path, cap: int, keep: Path | None = None) -> int:
    """Delete the least recently used tars until the folder holds at most `cap` bytes; returns
    the bytes freed. Other processes' downloads in progress (hidden .part files) count but stay."""
    entries = []
    for p in root.iterdir():
        try:
            st = p.stat()
        except FileNotFoundError:  # evicted by another process meanwhile
            continue
        entries.append((st.st_mtime, st.st_size, p))
    total = sum(e[1] for e in entries)
    freed = 0
    for _, size, p in sorted(entries, key=lambda e: e[0]):
        if total <= cap:
            break
        if p == keep or p.name.startswith("."):
            continue
        p.unlink(missing_ok=True)
        total -= size
        freed += size
    return freed


__all__ = [
    "DEFAULT",
    "RemoteIO",
    "ResilientReader",
    "StorageError",
    "cached",
    "evict",
    "is_url",
    "join",
    "open_shard",
    "read_bytes",
    "transient",
]
