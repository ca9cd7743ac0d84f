"""A generated corpus of audio uploads for fuzzing the server (issue 36, item 7): (class, name, bytes),
seeded, so every run sends the same files.

Classes: `length` (0, 1, 159, 160 and 161 samples: around one 10 ms hop), `subtype` (every format and
subtype soundfile can write, 0.5 s each, but SD2: its header lives in a resource fork, a second file,
which libsndfile writes as `._` into the working folder when asked for bytes, and a `._` there then
breaks its reading of MP3 from memory), `channels` (1..32), `rate` (1 kHz..384 kHz), `truncated`
(WAV, FLAC and Ogg files cut at random byte offsets), `garbage` (random bytes after a valid header).
"""

from __future__ import annotations

import io
import struct

import numpy as np
import soundfile as sf

RATES = (1000, 2000, 4000, 8000, 11025, 22050, 32000, 44100, 48000, 96000, 192000, 384000)


def _tone(seconds: float, rate: int, channels: int = 1, seed: int = 0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    rng = np.random.default_rng(seed)
    mono = 0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(len(t))
    return np.repeat(mono[:, None], channels, axis=1).astype(np.float32)


def _write(wave: np.ndarray, rate: int, fmt: str = "WAV", subtype: str | None = None) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, wave, rate, format=fmt, subtype=subtype)
    return buf.getvalue()


def _subtypes() -> list[tuple[str, str, bytes]]:
    out = []
    for fmt in sf.available_formats():
        if fmt == "SD2":
            continue
        for subtype in sf.available_subtypes(fmt):
            if not sf.check_format(fmt, subtype):
                continue
            for rate in (16000, 8000, 44100):  # some formats take fixed rates (GSM: 8 kHz)
                try:
                    out.append(("subtype", f"{fmt}/{subtype}@{rate}", _write(_tone(0.5, rate), rate, fmt, subtype)))
                    break
                except (sf.LibsndfileError, RuntimeError, ValueError, TypeError):
                    continue
    return out


def _wav_header(rate: int, channels: int, frames: int) -> bytes:
    block = channels * 2
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * block, block, 16)
    data = frames * block
    return (
        b"RIFF"
        + struct.pack("<I", 36 + data)
        + b"WAVEfmt "
        + struct.pack("<I", 16)
        + fmt
        + b"data"
        + struct.pack("<I", data)
    )


def corpus(seed: int = 0) -> list[tuple[str, str, bytes]]:
    rng = np.random.default_rng(seed)
    out = [("length", f"{n} samples", _write(_tone(n / 16000, 16000), 16000)) for n in (0, 1, 159, 160, 161)]
    out += [("length", f"{n} samples FLAC", _write(_tone(n / 16000, 16000), 16000, "FLAC")) for n in (1, 159, 161)]
    out += _subtypes()
    out += [("channels", f"{c} channels", _write(_tone(0.5, 16000, c), 16000)) for c in range(1, 33)]
    out += [("rate", f"{r} Hz", _write(_tone(0.5, r), r)) for r in RATES]
    whole = {
        "WAV": _write(_tone(1.0, 16000), 16000),
        "FLAC": _write(_tone(1.0, 16000), 16000, "FLAC"),
        "OGG": _write(_tone(1.0, 16000), 16000, "OGG", "VORBIS"),
    }
    for fmt, data in whole.items():
        for cut in sorted(rng.integers(1, len(data), 8)):
            out.append(("truncated", f"{fmt} cut at byte {cut} of {len(data)}", data[:cut]))
    headers = {
        "WAV": _wav_header(16000, 1, 8000),
        "WAV 32 ch": _wav_header(48000, 32, 8000),
        "FLAC": whole["FLAC"][:42],  # fLaC and its STREAMINFO
        "OGG": whole["OGG"][:58],  # the first page
        "AIFF": _write(_tone(0.1, 16000), 16000, "AIFF")[:54],
    }
    for name, head in headers.items():
        for k in range(4):
            out.append(("garbage", f"{name} header + random bytes #{k}", head + rng.bytes(int(rng.integers(1, 20000)))))
    return out
