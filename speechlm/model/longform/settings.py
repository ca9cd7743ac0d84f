"""Long-form settings: how audio of any length is cut into windows the model takes, as one frozen
`LongForm` that the cut (`cut.py`), the batching (`batching.py`), speechlm's CLIs, the server and the
exported model all take.

Three ways to cut (`docs/benchmarks.md` compares them on concatenated espeak-ng sentences):
- `"segments"` (voice-activity style, as WhisperX / Silero-VAD pipelines cut): a cut in the middle of
  every pause (a run of frames far below the recording's loud level), neighbouring segments merged
  while they fit `merge_seconds`, anything longer than `window_seconds` cut further as `"pause"` does,
  and segments of nothing but silence left out. No pause at all: `"pause"`'s windows.
- `"pause"`: cut at the quietest point (the middle of a pause) within the last part
  of each window, so no word is cut in two and the texts simply join. Windows never exceed
  `window_seconds`.
- `"overlap"`: fixed windows of `window_seconds` that overlap by `overlap_seconds`; words at the
  seams are heard twice (or cut in two) and the texts are merged where their words agree.

The long-form modules (this one, cut.py, stitch.py, batching.py) need only numpy and the standard
library: the exported model's pipeline runs these very files (copied into the export folder by
speechlm.model.folder.generate's VERBATIM table), so `transformers.pipeline` and `speechlm transcribe` cut alike.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from speechlm.audio_checks import SAMPLE_RATE

FRAME = 160  # 10 ms energy frames
STRATEGIES = ("segments", "pause", "overlap")
# The defaults every route shares (speechlm transcribe / eval, the server, the export's model and
# pipeline); chosen by measurement, docs/benchmarks.md "Long-form".
DEFAULT_STRATEGY = "segments"
WINDOW_SECONDS = 20.0  # training clips are capped at 19-20 s (docs/design.md): windows stay in that range
OVERLAP_SECONDS = 2.0  # "overlap": the audio two neighbouring windows share
THRESHOLD_DB = 35.0  # a frame is silent this far below the recording's loud level (its 95th percentile)
MIN_PAUSE_SECONDS = 0.3  # a silent run at least this long is a pause (a cut)
MERGE_SECONDS = 0.0  # neighbouring segments merge while they fit this (0: one segment per pause)
# at most this much of a pause stays before the speech that follows it, and after the speech it
# follows: the silence a model heard around speech in training (the demo's clips open within 0-0.29 s
# of speech, median 0.15 s, and end 0.18-0.68 s after it; more before, or less after, makes it answer
# more segments with nothing: docs/benchmarks.md, "Silence kept before and after speech")
KEEP_BEFORE_SECONDS = 0.15
KEEP_AFTER_SECONDS = 0.25
MIN_SOUND_SECONDS = 0.25  # a segment with less sound than this (a click) joins its neighbour
WORD_GAP_SECONDS = 0.05  # silence that ends a word's sound (sound_ends); 0.03-0.1 s measured alike on shards/timed


@dataclass(frozen=True)
class LongForm:
    """How long audio is cut: the strategy, the window (at most this long; `capped` to an encoder's
    limit), the overlap of `"overlap"` windows, and the `"segments"` cut's settings. Checked when made:
    a bad value raises ValueError naming its field (the segment settings whatever the strategy, so a
    bad flag fails at once)."""

    strategy: str = DEFAULT_STRATEGY
    window_seconds: float = WINDOW_SECONDS
    overlap_seconds: float = OVERLAP_SECONDS
    threshold_db: float = THRESHOLD_DB
    min_pause_seconds: float = MIN_PAUSE_SECONDS
    merge_seconds: float = MERGE_SECONDS
    keep_before_seconds: float = KEEP_BEFORE_SECONDS
    keep_after_seconds: float = KEEP_AFTER_SECONDS

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if not self.window_seconds * SAMPLE_RATE >= FRAME * 10:
            raise ValueError(f"window_seconds must be at least 0.1 s, got {self.window_seconds}")
        if not self.threshold_db > 0:
            raise ValueError(
                f"threshold_db must be positive (dB below the recording's loud level), got {self.threshold_db}"
            )
        if not self.min_pause_seconds >= FRAME / SAMPLE_RATE:
            raise ValueError(f"min_pause_seconds must be at least 0.01 s (one frame), got {self.min_pause_seconds}")
        if not self.merge_seconds >= 0:
            raise ValueError(f"merge_seconds must be >= 0 (0: one segment per pause), got {self.merge_seconds}")
        for name in ("keep_before_seconds", "keep_after_seconds"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        size = int(self.window_seconds * SAMPLE_RATE)
        fits = self.overlap_seconds >= 0 and int(self.overlap_seconds * SAMPLE_RATE) < size
        if self.strategy == "overlap" and not fits:
            raise ValueError(
                f"overlap_seconds must be in [0, window_seconds), got {self.overlap_seconds} for {self.window_seconds}"
            )

    def capped(self, limit: float | None) -> LongForm:
        """These settings with the window at most `limit` seconds (an encoder's longest input; None or 0: none)."""
        return replace(self, window_seconds=min(self.window_seconds, limit)) if limit else self


DEFAULT_LONG_FORM = LongForm()
