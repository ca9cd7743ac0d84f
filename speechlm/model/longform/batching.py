"""Every window of every clip transcribed as one job: the clips cut (`cut.clip_spans`), all their
windows sorted by length and handed to a batch function a batch at a time, the results put back in
order per clip and joined (`stitch.join`).

numpy and the standard library only: the export carries this file verbatim (see longform.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .cut import clip_spans
from .settings import DEFAULT_LONG_FORM, FRAME, LongForm
from .stitch import join


def transcribe_long(
    transcribe_batch: Callable[[list[np.ndarray]], list[str]],
    waves: Sequence[np.ndarray],
    long_form: LongForm = DEFAULT_LONG_FORM,
    batch_size: int = 16,
    min_samples: int = FRAME,
) -> list[str]:
    """Transcribe clips of any length: each is cut into windows as `long_form` says, all windows of all
    clips are sorted by length and transcribed `batch_size` at a time (little padding, one job), then
    each clip's window texts are joined in order. A window shorter than `min_samples` (a sliver at the
    end) is dropped: it holds no speech the previous window did not end with. `"segments"` transcribes
    no range of silence alone (`cut.segment_windows`)."""
    _, outs = transcribe_windows(transcribe_batch, waves, long_form, batch_size, min_samples)
    return [join(texts, long_form.strategy) for texts in outs]


def transcribe_windows(
    transcribe_batch: Callable[[list[np.ndarray]], list],
    waves: Sequence[np.ndarray],
    long_form: LongForm = DEFAULT_LONG_FORM,
    batch_size: int = 16,
    min_samples: int = FRAME,
) -> tuple[list[list[tuple[int, int]]], list[list]]:
    """(per clip its windows' (start, end) samples, per clip what `transcribe_batch` gave each window, in
    order): the cut and the length-sorted batches of `transcribe_long`, before any joining."""
    spans = [clip_spans(np.asarray(w), long_form, min_samples) for w in waves]
    pieces = [(c, i, waves[c][s:e]) for c, clip in enumerate(spans) for i, (s, e) in enumerate(clip)]
    order = sorted(range(len(pieces)), key=lambda k: -len(pieces[k][2]))  # longest first: an OOM shows at once
    results: list = [None] * len(pieces)
    for b in range(0, len(order), batch_size):
        idx = order[b : b + batch_size]
        for k, r in zip(idx, transcribe_batch([pieces[k][2] for k in idx])):
            results[k] = r
    outs, k = [], 0
    for clip in spans:
        outs.append(results[k : k + len(clip)])
        k += len(clip)
    return spans, outs
