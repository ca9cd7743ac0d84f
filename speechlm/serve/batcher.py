"""Dynamic batching: one model worker thread owns the model and runs batches of segments gathered
from every request in flight.

Each request is a Job: the segments its audio was cut into (`speechlm.inference`), queued longest first
as `transcribe` sorts them. A batch is filled round-robin, one segment from each job with segments
waiting and then again, up to `max_batch`, taking at most `max_per_request` segments of any one job.
The jobs take their turns fewest waiting segments first (then oldest first), so a 2 s request that
arrives while a 3-minute file's sixty segments wait is first in the very next batch, and the file's
batches, never more than `max_per_request` of its segments, end soon enough for it to get there. A
job that has waited `AGING_SECONDS` goes first whatever its size (the oldest first), so a long file is not starved by a
stream of short ones. The worker waits for a full batch at most `max_wait` after the oldest waiting
segment arrived. Segments of one batch are sorted by length (longest first) before the model sees
them, as `transcribe_long` sorts its batches. A clip's text does not depend on its batch mates
(`SpeechLM.transcribe`: features, masks and left-padded prompts are per row, every stop rule is per
row; in fp32 the rounding of other batch shapes is far below the model's margins, while a bf16
model can flip a near tie, in `transcribe` too), so a request's texts are those `transcribe` gives it.

A batch that fails fails alone: its segments are run again one at a time, and only a request whose
own segment fails gets the error (a `SegmentError`, saying whether its input was at fault); the rest
get their texts. Nothing a client does ends the worker: a client that hangs up cancels its future,
and a result for a cancelled future is dropped. If the worker ends anyway (a bug), every waiting
request fails, `alive` turns false and `on_death` is called (the server exits, so a supervisor
restarts it).
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future

import numpy as np

log = logging.getLogger("speechlm.serve")
AGING_SECONDS = 30.0


class SegmentError(Exception):
    """One request's segment failed when run alone. `input_fault`: the model refused the input itself
    (a ValueError: audio its feature extractor cannot take), else the server's own fault (a bug, out of
    memory). The cause is chained."""

    def __init__(self, error: BaseException, input_fault: bool):
        super().__init__(str(error) or type(error).__name__)
        self.input_fault = input_fault


class WorkerDead(RuntimeError):
    """The model worker thread has ended: nothing more will be transcribed in this process."""


class Job:
    """One request's segments, their texts as batches return them, and a future for all of them."""

    def __init__(
        self,
        segments: Sequence[np.ndarray],
        arrived: float,
        words: bool = False,
        request_id: str = "",
        prefixes: Sequence[str] | None = None,
        task=None,
    ):
        self.segments = list(segments)
        self.task = task  # the request's language and task (speechlm.inference.Task); None: transcription
        self.words = words  # the request wants word timestamps: its batches are transcribed with them
        # per segment, text the answer starts with (a live stream's committed words); None: none
        self.prefixes = list(prefixes) if prefixes is not None else None
        if self.prefixes is not None and len(self.prefixes) != len(self.segments):
            raise ValueError(f"{len(self.prefixes)} prefixes for {len(self.segments)} segments")
        self.request_id = request_id  # named in the log when its segment fails
        self.texts: list[str | None] = [None] * len(self.segments)
        self.pending = deque(sorted(range(len(self.segments)), key=lambda i: -len(self.segments[i])))
        self.left = len(self.segments)
        self.arrived = arrived
        self.future: Future = Future()
        self.cancelled = False
        self.id: int | None = None  # set when queued


def _settle(job: Job, result=None, error: BaseException | None = None) -> None:
    """The job's outcome, unless its client has cancelled the future meanwhile (then nobody waits):
    `set_running_or_notify_cancel` makes the check and the set one step that `cancel` cannot split."""
    if not job.future.set_running_or_notify_cancel():
        return
    if error is not None:
        job.future.set_exception(error)
    else:
        job.future.set_result(result)


class Batcher:
    """The model worker: `submit` a request's segments, get a Job whose future holds their texts in order."""

    def __init__(
        self,
        transcribe_batch: Callable[[list[np.ndarray], bool], list],
        max_batch: int = 16,
        max_wait: float = 0.01,
        max_per_request: int | None = None,
        on_death: Callable[[BaseException], None] | None = None,
    ):
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        if not (math.isfinite(max_wait) and max_wait >= 0):
            raise ValueError(f"max_wait must be a finite number >= 0, got {max_wait}")
        if max_per_request is not None and max_per_request < 1:
            raise ValueError(f"max_per_request must be at least 1, got {max_per_request}")
        self.transcribe_batch = transcribe_batch
        self.max_batch = max_batch
        self.max_per_request = min(max_per_request or max_batch, max_batch)
        self.max_wait = max_wait
        self.on_death = on_death
        self.death: BaseException | None = None
        self._cv = threading.Condition()
        self._jobs: dict[int, Job] = {}  # arrival order (dicts keep insertion order)
        self._ids = itertools.count()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.counts = {
            "batches": 0,
            "segments": 0,
            "segments_cancelled": 0,
            "largest_batch": 0,
            "failed_batches": 0,
            "segments_retried_alone": 0,
            "segments_failed": 0,
        }

    # ------------------------------------------------------------------ client side (any thread)
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="speechlm-model-worker", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Finish the batch in progress and end the worker; jobs still waiting fail."""
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        """The worker runs (or has not been started yet) and has not died."""
        return self.death is None and (self._thread is None or self._thread.is_alive() or self._stopping)

    def submit(
        self, segments: Sequence[np.ndarray], words: bool = False, request_id: str = "", prefixes=None, task=None
    ) -> Job:
        """Queue a request's segments (`prefixes`: per segment, the text its answer starts with: a live
        stream's window; the batch function is then called with them, "" for the other segments; `task`:
        its language and task, asked of each of its segments, batched with other requests' all the same:
        the model takes one per row)."""
        job = Job(segments, time.monotonic(), words, request_id, prefixes, task)
        if not job.segments:
            job.future.set_result([])
            return job
        with self._cv:
            if self.death is not None:
                raise WorkerDead(f"the model worker has died ({self.death!r})")
            if self._stopping:
                raise RuntimeError("the model worker has stopped")
            job.id = next(self._ids)
            self._jobs[job.id] = job
            self._cv.notify_all()
        return job

    def cancel(self, job: Job) -> None:
        """Drop a job (its client left): its waiting segments are never run; a batch already running
        with some of them finishes, and their texts are discarded. Safe at any moment, even while the
        worker delivers the job's result (then the result is dropped)."""
        with self._cv:
            if self._jobs.pop(job.id, None) is not None:
                job.cancelled = True
                self.counts["segments_cancelled"] += len(job.pending)
                job.pending.clear()
        job.future.cancel()

    def stats(self) -> dict:
        with self._cv:
            return {
                "alive": self.alive,
                "requests_queued": len(self._jobs),
                "segments_waiting": sum(len(j.pending) for j in self._jobs.values()),
                **self.counts,
            }

    # ------------------------------------------------------------------ the worker thread
    def _waiting(self) -> list[Job]:
        return [j for j in self._jobs.values() if j.pending]

    def _take(self) -> list[tuple[Job, int]]:
        """The next batch: round-robin over the jobs with waiting segments, fewest waiting first (a job
        waiting past AGING_SECONDS first of all), at most max_per_request of each."""
        now = time.monotonic()

        def turn(j: Job):  # the aged by age, then the rest by how little they wait for
            return (0, j.arrived, 0) if now - j.arrived >= AGING_SECONDS else (1, len(j.pending), j.arrived)

        jobs = sorted(self._waiting(), key=turn)
        picks: list[tuple[Job, int]] = []
        for _ in range(self.max_per_request):
            for j in jobs:
                if len(picks) == self.max_batch:
                    return picks
                if j.pending:
                    picks.append((j, j.pending.popleft()))
        return picks

    def _next_batch(self) -> list[tuple[Job, int]] | None:
        """Block until segments wait; then until a batch is full or the oldest has waited max_wait."""
        with self._cv:
            while not self._waiting():
                if self._stopping:
                    return None
                self._cv.wait()
            deadline = min(j.arrived for j in self._waiting()) + self.max_wait
            while not self._stopping:
                waiting = self._waiting()
                if not waiting or sum(len(j.pending) for j in waiting) >= self.max_batch:
                    break
                now = time.monotonic()
                if now >= deadline:
                    break
                self._cv.wait(deadline - now)
            return self._take()

    def _run(self) -> None:
        try:
            self._serve()
        except BaseException as e:  # noqa: BLE001 -- a bug: fail everyone now, and let the process go
            self._die(e)
            return
        self._fail_all(RuntimeError("the server stopped before this request ran"))

    def _serve(self) -> None:
        while True:
            picks = self._next_batch()
            if picks is None:
                return
            if not picks:  # every waiting job was cancelled during the wait
                continue
            picks.sort(key=lambda p: -len(p[0].segments[p[1]]))
            try:
                texts = self._transcribe(picks)
            except Exception as e:  # noqa: BLE001 -- one of the segments, or the batch: find out which
                self._isolate(picks, e)
                continue
            self._deliver(picks, texts)

    def _transcribe(self, picks: list[tuple[Job, int]]) -> list:
        segments, words = [j.segments[i] for j, i in picks], any(j.words for j, _ in picks)
        kwargs = {}
        if any(j.prefixes is not None for j, _ in picks):
            kwargs["prefixes"] = [j.prefixes[i] if j.prefixes is not None else "" for j, i in picks]
        if any(j.task is not None for j, _ in picks):
            kwargs["tasks"] = [j.task for j, _ in picks]
        if kwargs:
            texts = self.transcribe_batch(segments, words, **kwargs)
        else:  # the batch function of a server that serves plain transcription only takes (segments, words)
            texts = self.transcribe_batch(segments, words)
        if len(texts) != len(picks):
            raise RuntimeError(f"the model returned {len(texts)} texts for a batch of {len(picks)}")
        return texts

    def _isolate(self, picks: list[tuple[Job, int]], error: Exception) -> None:
        """A failed batch's segments, run again one at a time: each that fails alone fails its request
        (the input's fault for a ValueError; logged with the request id), the others are delivered."""
        with self._cv:
            self.counts["failed_batches"] += 1
        if len(picks) == 1:
            self._fail(picks[0][0], error)
            return
        log.warning("a batch of %d segments failed (%r); running them one at a time", len(picks), error)
        for job, i in picks:
            with self._cv:
                if job.cancelled or job.id not in self._jobs:  # gone, or failed by a segment before this one
                    continue
                self.counts["segments_retried_alone"] += 1
            try:
                texts = self._transcribe([(job, i)])
            except Exception as e:  # noqa: BLE001 -- this request's own segment failed
                self._fail(job, e)
                continue
            self._deliver([(job, i)], texts)

    def _deliver(self, picks: list[tuple[Job, int]], texts: list[str]) -> None:
        done = []
        with self._cv:
            self.counts["batches"] += 1
            self.counts["segments"] += len(picks)
            self.counts["largest_batch"] = max(self.counts["largest_batch"], len(picks))
            for (job, i), text in zip(picks, texts):
                if job.cancelled or job.id not in self._jobs:
                    continue
                job.texts[i] = text
                job.left -= 1
                if job.left == 0:
                    self._jobs.pop(job.id, None)
                    done.append(job)
        for job in done:  # outside the lock: a future's callbacks run here
            _settle(job, job.texts)

    def _fail(self, job: Job, error: Exception) -> None:
        input_fault = isinstance(error, ValueError)
        with self._cv:
            self.counts["segments_failed"] += 1
            live = not job.cancelled and self._jobs.pop(job.id, None) is not None
            job.pending.clear()
        if input_fault:
            log.warning("request %s: its audio was refused by the model: %s", job.request_id or "-", error)
        else:
            log.error("request %s: its segment failed", job.request_id or "-", exc_info=error)
        if live:
            failure = SegmentError(error, input_fault)
            failure.__cause__ = error
            _settle(job, error=failure)

    def _fail_all(self, error: Exception) -> None:
        with self._cv:
            jobs = list(self._jobs.values())
            self._jobs.clear()
        for job in jobs:
            _settle(job, error=error)

    def _die(self, error: BaseException) -> None:
        log.critical("the model worker died; every waiting request fails", exc_info=error)
        with self._cv:
            self.death = error
        self._fail_all(WorkerDead(f"the model worker died ({error!r})"))
        if self.on_death is not None:
            self.on_death(error)
