"""The server's batcher (speechlm.serve.batcher) alone, with a transcriber that names its input:
each request's texts in order, short requests past a long one's queue, the fewest waiting first with
aging, cancelling, and a failed batch failing only its requests."""

from __future__ import annotations

import time

import numpy as np
import pytest

from speechlm.serve.batcher import Batcher


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
        with pytest.raises(RuntimeError, match="boom"):
            bad.future.result(5)
        assert b.submit([np.zeros(5)]).future.result(5) == ["5"]  # the worker serves on
    finally:
        b.stop(5)
    assert sum(len(x) for x in batches) <= 6 and b.counts["segments_cancelled"] >= 14
    assert b.counts["failed_batches"] == 1 and b.stats()["segments_waiting"] == 0
