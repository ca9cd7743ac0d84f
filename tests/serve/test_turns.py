"""The realtime sessions' server VAD (speechlm/serve/turns.py) alone: turns start at the first speech
frame and stop once the silence after the last one lasts `silence_ms`, whatever the pieces' sizes; a
quiet room's noise is no speech; bad settings are refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from speechlm.serve.turns import TurnDetector

SR = 16000


def _signal(*parts: tuple[float, float], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([(level * rng.standard_normal(int(s * SR))).astype(np.float32) for s, level in parts])


@pytest.mark.parametrize("piece", [37, 160, 1600, 16000 * 5])
def test_turns_start_at_speech_and_stop_after_the_silence(piece):
    # a quiet room (-66 dBFS), speech (-20 dBFS), a short gap inside the turn, a long one, speech again
    room = 0.0005
    wave = _signal((1.0, room), (1.0, 0.1), (0.3, room), (0.8, 0.1), (1.2, room), (0.6, 0.1), (0.7, room))
    vad = TurnDetector(silence_ms=500)
    edges = [e for i in range(0, len(wave), piece) for e in vad.push(wave[i : i + piece])]
    started = [e[1] / SR for e in edges if e[0] == "started"]
    stopped = [(e[1] / SR, e[2] / SR) for e in edges if e[0] == "stopped"]
    assert started == pytest.approx([1.0, 4.3], abs=0.03)  # the 0.3 s gap is inside the first turn
    assert [s for s, _ in stopped] == pytest.approx([3.1, 4.9], abs=0.03)
    assert [d - s for s, d in stopped] == pytest.approx([0.5, 0.5], abs=0.015)
    assert [e[0] for e in edges] == ["started", "stopped", "started", "stopped"]


def test_a_quiet_room_is_no_speech_and_the_threshold_sets_the_floor():
    room = _signal((3.0, 0.0005))  # -66 dBFS, below the default floor of -50 dBFS
    assert TurnDetector().push(room) == [] and TurnDetector().push(np.zeros(SR, np.float32)) == []
    assert TurnDetector(threshold=0.1).push(room)[0][0] == "started"  # a floor of -74 dBFS hears it
    for bad, name in [({"silence_ms": 0}, "silence_duration_ms"), ({"threshold": 1.5}, "threshold")]:
        with pytest.raises(ValueError, match=name):
            TurnDetector(**bad)
