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
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future

import numpy as np

log = logging.getLogger("speechlm.serve")
AGING_SECONDS = 30.0


class Job:
    """One request's segments, their texts as batches return them, and a future for all of them."""

    def __init__(self, segments: Sequence[np.ndarray], arrived: float, words: bool = False):
        self.segments = list(segments)
        self.words = words  # the request wants word timestamps: its batches are transcribed with them
        self.texts: list[str | None] = [None] * len(self.segments)
        self.pending = deque(sorted(range(len(self.segments)), key=lambda i: -len(self.segments[i])))
        self.left = len(self.segments)
        self.arrived = arrived
        self.future: Future = Future()
        self.cancelled = False
        self.id: int | None = None  # set when queued


class Batcher:
    """The model worker: `submit` a request's segments, get a Job whose future holds their texts in order."""

    def __init__(
        self,
        transcribe_batch: Callable[[list[np.ndarray], bool], list],
        max_batch: int = 16,
        max_wait: float = 0.01,
        max_per_request: int | None = None,
    ):
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        if max_wait < 0:
            raise ValueError(f"max_wait must be >= 0, got {max_wait}")
        if max_per_request is not None and max_per_request < 1:
            raise ValueError(f"max_per_request must be at least 1, got {max_per_request}")
        self.transcribe_batch = transcribe_batch
        self.max_batch = max_batch
        self.max_per_request = min(max_per_request or max_batch, max_batch)
        self.max_wait = max_wait
        self._cv = threading.Condition()
        self._jobs: dict[int, Job] = {}  # arrival order (dicts keep insertion order)
        self._ids = itertools.count()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.counts = {"batches": 0, "segments": 0, "segments_cancelled": 0, "largest_batch": 0, "failed_batches": 0}

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

    def submit(self, segments: Sequence[np.ndarray], words: bool = False) -> Job:
        job = Job(segments, time.monotonic(), words)
        if not job.segments:
            job.future.set_result([])
            return job
        with self._cv:
            if self._stopping:
                raise RuntimeError("the model worker has stopped")
            job.id = next(self._ids)
            self._jobs[job.id] = job
            self._cv.notify_all()
        return job

    def cancel(self, job: Job) -> None:
        """Drop a job (its client left): its waiting segments are never run; a batch already running
        with some of them finishes, and their texts are discarded."""
        with self._cv:
            if self._jobs.pop(job.id, None) is None:
                return
            job.cancelled = True
            self.counts["segments_cancelled"] += len(job.pending)
            job.pending.clear()
        job.future.cancel()

    def stats(self) -> dict:
        with self._cv:
            return {
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
        while True:
            picks = self._next_batch()
            if picks is None:
                break
            if not picks:  # every waiting job was cancelled during the wait
                continue
            picks.sort(key=lambda p: -len(p[0].segments[p[1]]))
            try:
                texts = self.transcribe_batch([j.segments[i] for j, i in picks], any(j.words for j, _ in picks))
                if len(texts) != len(picks):
                    raise RuntimeError(f"the model returned {len(texts)} texts for a batch of {len(picks)}")
            except Exception as e:  # noqa: BLE001 -- the jobs get the error; the worker keeps serving
                log.exception("batch of %d segments failed", len(picks))
                self._fail({j for j, _ in picks}, e)
                continue
            self._deliver(picks, texts)
        with self._cv:  # stopped: nothing more will run
            for job in list(self._jobs.values()):
                job.future.set_exception(RuntimeError("the server stopped before this request ran"))
            self._jobs.clear()

    def _deliver(self, picks: list[tuple[Job, int]], texts: list[str]) -> None:
        done = []
        with self._cv:
            self.counts["batches"] += 1
            self.counts["segments"] += len(picks)
            self.counts["largest_batch"] = max(self.counts["largest_batch"], len(picks))
            for (job, i), text in zip(picks, texts):
                if job.cancelled:
                    continue
                job.texts[i] = text
                job.left -= 1
                if job.left == 0:
                    self._jobs.pop(job.id, None)
                    done.append(job)
        for job in done:  # outside the lock: a future's callbacks run here
            job.future.set_result(job.texts)

    def _fail(self, jobs: set[Job], error: Exception) -> None:
        with self._cv:
            self.counts["failed_batches"] += 1
            live = [j for j in jobs if not j.cancelled and self._jobs.pop(j.id, None) is not None]
            for j in live:
                j.pending.clear()
        for j in live:
            j.future.set_exception(error)
