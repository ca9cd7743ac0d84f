"""The server's process: the model loaded, its batcher, the app on uvicorn, and the drain that ends it
(`serve(cfg, bases, log_level)` -> the exit status; `speechlm serve`, speechlm/commands/serve.py, runs it)."""

from __future__ import annotations

import logging
import signal
import time

import uvicorn

from speechlm.serve.app import create_app
from speechlm.serve.batcher import Batcher
from speechlm.serve.config import ServeConfig
from speechlm.serve.engine import Engine

log = logging.getLogger("speechlm.serve")

GRACE_SECONDS = 1.0  # after the drain, for answers being sent and connections closing: uvicorn's graceful wait


def draining_server(state, shutdown_timeout: float):
    class DrainingServer(uvicorn.Server):
        """uvicorn's server with a drain before its graceful shutdown. The first SIGTERM (or Ctrl-C) marks
        the server draining (new requests and /health: 503, so a load balancer moves on) while the
        listening socket stays open. Once no request is being read or in flight, uvicorn's own shutdown
        runs; at `shutdown_timeout` those still waiting are cut: each gets an OpenAI-shaped 503
        `shutting_down` (state.cut_short), and uvicorn's graceful wait is only `GRACE_SECONDS` for those
        answers to go out, so the whole shutdown keeps to `--shutdown-timeout`. A second signal cuts at
        once and exits without waiting for anything (Ctrl-C twice; status 128 + the signal). If the
        model worker dies (`die`), /health turns unhealthy and the server shuts down, to exit with
        status 1 for a supervisor."""

        deadline: float | None = None
        died: BaseException | None = None
        forced: int | None = None  # the second signal

        def handle_exit(self, sig, frame):
            if state.draining or self.should_exit:
                log.warning("%s again: exiting now", signal.Signals(sig).name)
                state.cut_short()
                self.forced, self.should_exit, self.force_exit = sig, True, True
                return
            state.draining = True
            self.deadline = time.monotonic() + shutdown_timeout
            busy = state.in_flight + state.reading
            log.info("%s: draining %d request(s)", signal.Signals(sig).name, busy)

        def die(self, error: BaseException) -> None:
            """The model worker has died (called from its thread): shut down, then exit 1."""
            self.died = error
            self.should_exit = True

        async def on_tick(self, counter: int) -> bool:
            if state.draining and not self.should_exit:
                busy = state.in_flight + state.reading
                if busy and time.monotonic() > self.deadline:
                    log.warning("shutdown timeout: %d request(s) still in flight get 503", busy)
                    state.cut_short()
                    busy = 0
                if busy == 0:
                    state.stop_timeout = max(0.5, self.deadline - time.monotonic())
                    self.should_exit = True
            return await super().on_tick(counter)

    return DrainingServer


def serve(cfg: ServeConfig, bases: dict | None, log_level: str) -> int:
    """Serve until drained or killed; the process's exit status (1: the model worker died; 128 + the
    signal: a second signal cut the drain)."""
    engine = Engine.load(cfg.model, cfg.long_form, bases)
    names = cfg.served_model_names or [Engine.default_name(cfg.model)]
    batcher = Batcher(engine.transcribe_batch, cfg.max_batch, cfg.max_wait_ms / 1000, cfg.max_per_request)
    app = create_app(cfg, engine, batcher, names)
    uv = uvicorn.Config(
        app,
        host=cfg.host,
        port=cfg.port,
        log_level=log_level,
        timeout_graceful_shutdown=GRACE_SECONDS,
        lifespan="on",
        ws="websockets",  # the realtime route (serve/realtime.py); a message over the upload limit closes it (1009)
        ws_max_size=cfg.max_upload_bytes,
    )
    server = draining_server(app.state.serve, cfg.shutdown_timeout)(uv)
    batcher.on_death = server.die
    log.info(
        "serving %s as %s on http://%s:%d (max batch %d, %d per request, max wait %g ms, max concurrent %d, "
        "API key %s)",
        cfg.model,
        ", ".join(names),
        cfg.host,
        cfg.port,
        cfg.max_batch,
        cfg.max_per_request,
        cfg.max_wait_ms,
        cfg.max_concurrent,
        "required" if cfg.api_key else "not required",
    )
    server.run()
    code = 0
    if server.died is not None:
        log.critical("exiting with status 1: the model worker died (%r)", server.died)
        code = 1
    elif server.forced is not None:
        code = 128 + server.forced  # as a process ended by the signal reports itself
    log.info("stopped (exit status %d)", code)
    return code
