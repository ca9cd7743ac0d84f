"""The server's settings (`python -m speechlm.serve --help` sets them)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from speechlm.config import ConfigError
from speechlm.inference import DEFAULT_LONG_FORM, LongForm

API_KEY_ENV = "SPEECHLM_API_KEY"
MAX_UPLOAD_MB = 25.0  # OpenAI's own limit for this endpoint
MAX_SECONDS = 3600.0  # an hour of audio: a decoded request holds 230 MB of float32 at most


MAX_WAIT_MS = 10_000.0  # a batch that waits longer to fill is a mistyped setting


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclass
class ServeConfig:
    model: str
    host: str = "127.0.0.1"
    port: int = 8000
    served_model_names: list[str] = field(default_factory=list)  # the `model` values accepted; first: listed
    api_key: str | None = field(default=None, repr=False)  # never printed, never logged
    max_batch: int = 16
    # one request's segments in one batch: a long file's batches stay short, so a newcomer soon gets in
    max_per_request: int = 4
    max_wait_ms: float = 10.0
    max_concurrent: int = 64  # requests being read, queued or transcribed; beyond it: 503
    max_upload_mb: float = MAX_UPLOAD_MB
    max_seconds: float = MAX_SECONDS
    shutdown_timeout: float = 60.0  # SIGTERM: how long requests in flight may take to finish, in all
    read_timeout: float = 30.0  # an upload that sends nothing for this long: 408
    # the long-form cut, as transcribe's flags give it (speechlm.inference.long_form_from_args)
    long_form: LongForm = DEFAULT_LONG_FORM

    def check(self) -> None:
        """Every setting, before anything loads: a bad one is a ConfigError naming its flag (NaN and
        inf included: `--max-wait-ms inf` would end the model worker, `nan` hang every request)."""
        for name in ("max_batch", "max_per_request", "max_concurrent"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{_flag(name)} must be at least 1, got {getattr(self, name)}")
        for name in ("max_wait_ms", "shutdown_timeout"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"{_flag(name)} must be a finite number >= 0, got {value:g}")
        for name in ("max_upload_mb", "max_seconds", "read_timeout"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{_flag(name)} must be a finite positive number, got {value:g}")
        if self.max_wait_ms > MAX_WAIT_MS:
            raise ConfigError(
                f"--max-wait-ms must be at most {MAX_WAIT_MS:g} (a batch waits no longer), got {self.max_wait_ms:g}"
            )
        if not 0 < self.port < 65536:
            raise ConfigError(f"--port must be in 1..65535, got {self.port}")
        if self.api_key is not None:  # the key itself is never printed
            if not self.api_key.strip():
                raise ConfigError(f"--api-key (or {API_KEY_ENV}) is empty; leave it unset to serve without a key")
            if self.api_key != self.api_key.strip():
                raise ConfigError(
                    f"--api-key (or {API_KEY_ENV}) begins or ends with whitespace, so no client could send it "
                    "(clients' keys are read without it); remove it"
                )
            if not self.api_key.isascii() or any(c.isspace() or not c.isprintable() for c in self.api_key):
                raise ConfigError(
                    f"--api-key (or {API_KEY_ENV}) must be printable ASCII without spaces: an HTTP header carries it"
                )

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 1024 * 1024)
