"""vLLM's transcription endpoint with speechlm's long-form cut, and short requests ahead of long ones.

vLLM's `/v1/audio/transcriptions` decodes a recording, cuts it into chunks (its own energy-based cut,
at `max_audio_clip_s`), transcribes each chunk as one request and joins the texts with a space.
speechlm cuts every recording, short ones too, at its pauses (the folder's speechlm_cut.py), and joins
the windows' texts with a space, leaving out empty ones. `install()` wraps the endpoint's one cutting
step (`SpeechToTextBaseServing._decode_and_chunk_speech`) so that a model class with
`speechlm_windows` gets its recordings cut that way; every other model keeps vLLM's cut.

The endpoint submits all of a recording's windows at once, with the engine's default priority, so under
vLLM's first-come-first-served scheduler a 2 s clip that arrives after a 3-minute recording waits for the
recording's ~60 window prefills. `install()` also wraps `_create_speech_to_text` so that each engine
request it submits carries its window's index in the recording as its priority (`WindowPriority`):
under `vllm serve --scheduling-policy priority` (lower first, ties by arrival) every recording's k-th
window is taken before any recording's (k+1)-th, so a one-window request waits at most for the windows
already running, and a long recording still advances (nothing starves). Under the default `fcfs` policy
vLLM ignores the priority.

Priority orders the waiting queue only: vLLM fills each step's token budget with the running requests
first, then with waiting ones, so a short request admitted at once still shares every step with the
recording's windows, their prefills (encoder and placeholders) included. `SPEECHLM_VLLM_WINDOWS_IN_FLIGHT=K`
(`WINDOWS_ENV`) also submits each recording's windows gradually: at most K of one request's windows are
in the engine at once, the next when one finishes. Unset (the default) or 0: all at once, vLLM's way.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import logging
import os

log = logging.getLogger(__name__)
WINDOWS_ENV = "SPEECHLM_VLLM_WINDOWS_IN_FLIGHT"


def windows_in_flight() -> int | None:
    """`WINDOWS_ENV` as a count (None: no limit); a value that is not a count >= 0 is an error naming it."""
    raw = os.environ.get(WINDOWS_ENV, "").strip()
    try:
        k = int(raw) if raw else 0
    except ValueError:
        k = -1
    if k < 0:
        raise ValueError(f"{WINDOWS_ENV}={raw!r}: give a whole number of windows >= 0 (0 or unset: no limit)")
    return k or None


class _Submission:
    """One transcription request's submission: its windows' count, and its gate when windows are limited."""

    def __init__(self, limit: int | None):
        self.count = itertools.count()
        self.gate = asyncio.Semaphore(limit) if limit else None


# the transcription request being submitted (set per request: asyncio gives each HTTP request its own
# context, so concurrent requests count separately)
_submission = contextvars.ContextVar("speechlm_submission", default=None)


class WindowPriority:
    """The endpoint's engine client, with `generate` given the submitting request's next window index as
    its `priority` (when a transcription request is being submitted and no priority was passed), and
    held at the request's gate when its windows are limited."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, name):
        return getattr(self._client, name)

    def generate(self, *args, **kwargs):
        sub = _submission.get()
        if sub is None:
            return self._client.generate(*args, **kwargs)
        if "priority" not in kwargs:
            kwargs["priority"] = next(sub.count)
        if sub.gate is None:
            return self._client.generate(*args, **kwargs)
        return self._gated(sub.gate, args, kwargs)

    async def _gated(self, gate: asyncio.Semaphore, args, kwargs):
        # the endpoint starts its windows' generators in order, so they pass the gate in order; a
        # cancelled request leaves its unsubmitted windows unsubmitted
        async with gate:
            async with contextlib.aclosing(self._client.generate(*args, **kwargs)) as outputs:
                async for out in outputs:
                    yield out


def install() -> None:
    try:
        from vllm.entrypoints.speech_to_text.base.serving import SpeechToTextBaseServing
    except ImportError:  # a vLLM without the endpoint (or with it elsewhere): nothing to wrap
        log.warning("speechlm_vllm: vLLM's speech-to-text serving was not found; long audio is cut by vLLM")
        return
    _install_cut(SpeechToTextBaseServing)
    _install_priority(SpeechToTextBaseServing)


def _install_cut(serving) -> None:
    original = serving._decode_and_chunk_speech
    if getattr(original, "_speechlm", False):
        return

    def decode_and_cut(self, audio_data: bytes):
        chunks, duration = original(self, audio_data)
        cut = getattr(self.model_cls, "speechlm_windows", None)
        if cut is None:
            return chunks, duration
        windows = [w for c in chunks for w in cut(self.model_config, c)]
        # a recording with no sound at all: one window, whose text the model gives (vLLM needs one request)
        return windows or chunks[:1], duration

    decode_and_cut._speechlm = True
    serving._decode_and_chunk_speech = decode_and_cut


def _install_priority(serving) -> None:
    original = serving._create_speech_to_text
    if getattr(original, "_speechlm", False):
        return
    limit = windows_in_flight()  # read once, when vLLM loads the plugin: a bad value stops the server

    async def create_with_window_priority(self, *args, **kwargs):
        if getattr(self.model_cls, "speechlm_windows", None) is None:
            return await original(self, *args, **kwargs)
        if not isinstance(self.engine_client, WindowPriority):
            self.engine_client = WindowPriority(self.engine_client)
        token = _submission.set(_Submission(limit))
        try:
            return await original(self, *args, **kwargs)
        finally:
            _submission.reset(token)

    create_with_window_priority._speechlm = True
    serving._create_speech_to_text = create_with_window_priority
