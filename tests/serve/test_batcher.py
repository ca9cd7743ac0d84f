"""The server's batcher (speechlm.serve.batcher) alone, with a transcriber that names its input:
each request's texts in order, short requests past a long one's queue, the fewest waiting first with
aging, cancelling, a failed batch failing only the request whose segment fails, hang-ups racing the
delivery, and a worker that dies."""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

from speechlm.serve.batcher import Batcher, SegmentError, WorkerDead


# ---------------------------------------------------------------------------- the batcher alone
def _namer(batches: list, delay: float = 0.0):
    """A transcriber whose text for a segment is its length, recording each batch's lengths."""

    def transcribe(waves, words=False):
        batches.append([len(w) for w in waves])
        time.sleep(delay)
        return [str(len(w)) for w in waves]

    return transcribe


def test_batcher_returns_each_requests_texts_in_order_and_sorts_each_batch():
    batches = []
    b = Batcher(_namer(batches), max_batch=4, max_wait=0.05)
    b.start()
    try:
        jobs = [b.submit([np.zeros(n) for n in lengths]) for lengths in ([5, 9, 7], [3], [8, 2, 6, 4, 1])]
        assert [j.future.result(10) for j in jobs] == [["5", "9", "7"], ["3"], ["8", "2", "6", "4", "1"]]
        assert b.submit([]).future.result(1) == []
    finally:
        b.stop(5)
    assert all(batch == sorted(batch, reverse=True) and len(batch) <= 4 for batch in batches)
    assert sum(map(len, batches)) == 9 and b.counts["largest_batch"] == 4  # gathered within max_wait


def test_live_windows_batch_with_requests_and_carry_their_prefixes():
    """A live stream's window (serve/live.py) is a job with a prefix per segment: the batch function
    gets them, "" for the other requests' segments, and word timestamps for the whole batch."""
    calls = []

    def transcribe(waves, words=False, prefixes=None):
        calls.append((sorted(len(w) for w in waves), words, prefixes))
        return [f"{p or ''}+{len(w)}" for w, p in zip(waves, prefixes or [None] * len(waves))]

    b = Batcher(transcribe, max_batch=4, max_wait=0.2)
    b.start()
    try:
        plain = b.submit([np.zeros(3)])
        live = b.submit([np.zeros(5)], words=True, prefixes=["the cat"])
        assert live.future.result(10) == ["the cat+5"] and plain.future.result(10) == ["+3"]
        assert b.submit([np.zeros(2)]).future.result(10) == ["+2"]  # no prefix in the batch: called as before
    finally:
        b.stop(5)
    assert calls == [([3, 5], True, ["the cat", ""]), ([2], False, None)]
    with pytest.raises(ValueError, match="2 prefixes for 1 segments"):
        b.submit([np.zeros(1)], prefixes=["a", "b"])


def test_batcher_lets_a_short_request_into_the_next_batch_past_a_long_ones_queue():
    batches = []
    b = Batcher(_namer(batches, delay=0.1), max_batch=8, max_wait=0.0, max_per_request=2)
    b.start()
    try:
        long = b.submit([np.zeros(1000 + i) for i in range(40)])  # twenty batches' worth
        while not batches:
            time.sleep(0.005)
        short = b.submit([np.zeros(7), np.zeros(5)])
        assert short.future.result(10) == ["7", "5"]
        assert not long.future.done()  # the short one did not wait for the long one's queue
        assert len(long.future.result(20)) == 40
    finally:
        b.stop(5)
    assert batches[0] == [1039, 1038]  # one request's segments, longest first, at most max_per_request
    assert batches[1] == [1037, 1036, 7, 5]  # the batch after the one running when the short one came
    assert all(len(x) == 2 for x in batches[2:])


def test_batcher_serves_the_fewest_waiting_first_and_ages_the_rest():
    from speechlm.serve import batcher as mod

    batches = []
    b = Batcher(_namer(batches), max_batch=3, max_wait=0.2, max_per_request=3)
    big = [np.zeros(100 + i) for i in range(6)]
    jobs = [b.submit(big), b.submit([np.zeros(50), np.zeros(40)]), b.submit([np.zeros(9)])]  # before the worker
    b.start()
    try:
        [j.future.result(5) for j in jobs]
    finally:
        b.stop(5)
    # round-robin by fewest waiting: the 1-segment job, the 2-segment one, the 6-segment one, ...
    assert batches[0] == [105, 50, 9] and batches[1] == [104, 103, 40]
    old = mod.AGING_SECONDS
    try:
        mod.AGING_SECONDS, batches[:] = 0.0, []  # everyone has waited long enough: the oldest go first
        b = Batcher(_namer(batches), max_batch=1, max_wait=0.2)
        jobs = [b.submit(big), b.submit([np.zeros(9)])]
        b.start()
        [j.future.result(5) for j in jobs]
        b.stop(5)
    finally:
        mod.AGING_SECONDS = old
    assert batches[0] == [105]  # not the 1-segment job that came after it


def test_batcher_cancel_drops_waiting_segments_and_a_failed_batch_fails_only_its_requests():
    batches, calls = [], []

    def flaky(waves, words=False):
        calls.append(len(waves))
        if any(len(w) == 13 for w in waves):
            raise RuntimeError("boom")
        return _namer(batches, delay=0.05)(waves, words)

    b = Batcher(flaky, max_batch=2, max_wait=0.0)
    b.start()
    try:
        long = b.submit([np.zeros(100) for _ in range(20)])
        while not batches:
            time.sleep(0.005)
        b.cancel(long)
        assert long.future.cancelled()
        bad = b.submit([np.zeros(13)])
        with pytest.raises(SegmentError, match="boom") as e:
            bad.future.result(5)
        assert not e.value.input_fault and isinstance(e.value.__cause__, RuntimeError)  # the server's fault
        assert b.submit([np.zeros(5)]).future.result(5) == ["5"]  # the worker serves on
    finally:
        b.stop(5)
    assert sum(len(x) for x in batches) <= 6 and b.counts["segments_cancelled"] >= 14
    assert b.counts["failed_batches"] == 1 and b.stats()["segments_waiting"] == 0


def _poisoned(batches: list):
    """A transcriber that refuses a whole batch holding a segment shorter than 10 samples, as the
    feature extractor refuses a clip shorter than one hop (ValueError)."""

    def transcribe(waves, words=False):
        batches.append([len(w) for w in waves])
        short = [i for i, w in enumerate(waves) if len(w) < 10]
        if short:
            raise ValueError(f"clip {short[0]}: {len(waves[short[0]])} samples is shorter than one hop (10)")
        return [str(len(w)) for w in waves]

    return transcribe


def test_a_poisoned_batch_fails_only_the_request_whose_segment_fails():
    batches = []
    b = Batcher(_poisoned(batches), max_batch=16, max_wait=0.2)
    good = [b.submit([np.zeros(100 + i), np.zeros(50 + i)]) for i in range(8)]
    bad = b.submit([np.zeros(5)])
    mixed = b.submit([np.zeros(30), np.zeros(3)])  # one good segment, one bad: the request fails
    b.start()  # all in one batch
    try:
        assert [j.future.result(10) for j in good] == [[str(100 + i), str(50 + i)] for i in range(8)]
        for job in (bad, mixed):
            with pytest.raises(SegmentError, match="shorter than one hop") as e:
                job.future.result(10)
            assert e.value.input_fault  # a ValueError from the model: the input's fault (a 400)
    finally:
        b.stop(5)
    assert len(batches[0]) == 16 and 5 in batches[0]  # the first batch held the poison
    assert b.counts["failed_batches"] >= 1 and b.counts["segments_failed"] == 2
    assert b.alive and b.stats()["segments_waiting"] == 0


def test_hang_ups_racing_the_delivery_never_end_the_worker():
    """Server finding 1: a client's future cancelled between the worker's taking its job out of the
    queue and setting its result raised InvalidStateError in the worker, which died. Here each round
    cancels a job at a random moment around its delivery (bounded: 3000 rounds or 20 s)."""
    b = Batcher(lambda waves, words=False: [str(len(w)) for w in waves], max_batch=4, max_wait=0.0)
    b.start()
    rng = random.Random(0)
    errors = []
    threading.excepthook, hook = (lambda args: errors.append(args.exc_value)), threading.excepthook
    try:
        deadline, rounds = time.monotonic() + 20, 0
        while rounds < 3000 and time.monotonic() < deadline:
            jobs = [b.submit([np.zeros(8)]) for _ in range(4)]
            for j in jobs:  # the app's asyncio wrapper's callback: it widens the window between deliveries
                j.future.add_done_callback(lambda f: time.sleep(2e-4))
            time.sleep(rng.random() * 5e-4)
            for j in jobs[1:]:
                b.cancel(j)  # what the app does when a client hangs up; its asyncio wrapper cancels too
                j.future.cancel()
            assert jobs[0].future.result(5) == ["8"]
            rounds += 1
        assert b.alive and not errors, errors
        assert b.submit([np.zeros(3)]).future.result(5) == ["3"]  # and it serves on
    finally:
        threading.excepthook = hook
        b.stop(5)
    assert rounds >= 500


class _Fatal(BaseException):
    """Something no `except Exception` catches: the worker's loop itself ends."""


def test_a_worker_that_dies_fails_everyone_waiting_and_says_so():
    deaths = []
    gate = threading.Event()

    def fatal(waves, words=False):
        gate.wait(5)
        raise _Fatal("a bug in the worker")

    b = Batcher(fatal, max_batch=1, max_wait=0.0, on_death=deaths.append)
    b.start()
    first, second = b.submit([np.zeros(4)]), b.submit([np.zeros(5)])
    assert b.alive and b.stats()["alive"]
    gate.set()
    for job in (first, second):
        with pytest.raises(WorkerDead, match="a bug in the worker"):
            job.future.result(5)
    assert len(deaths) == 1 and isinstance(deaths[0], _Fatal)
    assert not b.alive and not b.stats()["alive"]
    with pytest.raises(WorkerDead):
        b.submit([np.zeros(3)])


@pytest.mark.parametrize("wait", [float("inf"), float("nan"), -1.0])
def test_the_batcher_refuses_a_wait_that_is_not_a_finite_number(wait):
    with pytest.raises(ValueError, match="max_wait must be a finite number"):
        Batcher(lambda waves, words=False: [], max_wait=wait)
