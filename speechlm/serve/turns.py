"""Server VAD for realtime sessions (serve/realtime.py): where a speaker's turn starts and ends in a
live stream of 16 kHz audio, from the long-form cut's silence detector (`cut.silent_frames`).

A 10 ms frame is speech when the cut does not call it silent (measured against the loud level of the
last `CONTEXT_SECONDS`, as a live stream's window is) and its power is above an absolute floor: before
anyone has spoken the loud level is the room's, and the relative rule alone would call its noise
speech. OpenAI's `threshold` (0-1, default 0.5, a VAD probability there) sets that floor here:
`FLOOR_DB + FLOOR_RANGE_DB * threshold` dBFS (0.5: -50 dBFS; a quiet room is below -60, speech at
-35 to -15). A turn ends once `silence_duration_ms` of frames after its last speech are not speech.
Each frame is judged once, when it arrives (a live detector cannot wait for what follows).
"""

from __future__ import annotations

import numpy as np

from speechlm.model.longform.cut import frame_energy_db, silent_frames
from speechlm.model.longform.settings import FRAME, SAMPLE_RATE, THRESHOLD_DB
from speechlm.model.longform.stream_settings import CONTEXT_SECONDS  # the loud level's span, as a stream's

FLOOR_DB = -80.0
FLOOR_RANGE_DB = 60.0


class TurnDetector:
    """Feed 16 kHz samples with `push`; it returns the turns' edges found in them, as
    ("started", sample) at a turn's first speech frame and ("stopped", speech_end, sample) once the
    turn's silence has lasted `silence_ms` (`sample`: where that was decided), on the stream's clock."""

    def __init__(self, silence_ms: float = 500, threshold: float = 0.5, threshold_db: float = THRESHOLD_DB):
        if not silence_ms > 0:
            raise ValueError(f"silence_duration_ms must be positive, got {silence_ms}")
        if not 0 <= threshold <= 1:
            raise ValueError(f"threshold must be within 0 and 1, got {threshold}")
        self.silence = max(1, round(silence_ms / 1000 * SAMPLE_RATE / FRAME))  # frames
        self.floor_db = FLOOR_DB + FLOOR_RANGE_DB * threshold
        self.threshold_db = threshold_db
        self._audio = np.zeros(0, np.float32)  # the context and the frames not judged yet
        self._judged = 0  # stream frames judged
        self._base = 0  # stream sample of _audio[0] (a frame bound)
        self.speaking = False
        self._last = 0  # stream frame after the turn's last speech frame

    def push(self, piece: np.ndarray) -> list[tuple]:
        self._audio = np.concatenate([self._audio, np.asarray(piece, np.float32)])
        n = len(self._audio) // FRAME
        first = self._judged - self._base // FRAME  # the first frame of _audio not judged yet
        if n <= first:
            return []
        audio = self._audio[: n * FRAME]
        speech = ~silent_frames(audio, self.threshold_db) & (frame_energy_db(audio) > self.floor_db)
        edges = []
        for i in range(first, n):
            frame = self._base // FRAME + i
            if speech[i]:
                if not self.speaking:
                    edges.append(("started", frame * FRAME))
                self.speaking, self._last = True, frame + 1
            elif self.speaking and frame + 1 - self._last >= self.silence:
                self.speaking = False
                edges.append(("stopped", self._last * FRAME, (frame + 1) * FRAME))
        self._judged = self._base // FRAME + n
        keep = int(CONTEXT_SECONDS * SAMPLE_RATE) // FRAME * FRAME
        drop = max(0, n * FRAME - keep)
        self._audio, self._base = self._audio[drop:], self._base + drop
        return edges
