"""On-the-fly training augmentation of decoded clips (the `data.augment` section), run in the reader's workers.

Every random draw comes from (run seed, epoch, clip id) and nothing else, so an augmented clip is
the same after any resume, on any number of ranks or workers, in any order. Each transform draws
from its own stream (`ClipDraws`), so turning one transform on or off leaves the others' draws
alone. A clip that a weight-2 set repeats within one epoch gets the same augmentation both times
(its id and epoch are the same).

Order, as a recording chain would apply them: speed -> reverb -> noise -> gain -> band limit ->
clipping -> lossy codec. SpecAugment masks act on the features (`spec_masks`, in the collator).

Noise and RIR folders are listed once, sorted, when the Augmenter is built (the trainer builds it
before any process group, so a missing or empty folder is a ConfigError naming the key). A file
that will not decode at training time is a counted, logged skip: that clip gets generated noise
(or a synthetic RIR) from the same draws, so the result is still deterministic.
"""

from __future__ import annotations

import copy
import hashlib
import io
import logging
from collections import Counter
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr
import torch

from speechlm import audio as audio_io
from speechlm.audio import SAMPLE_RATE
from speechlm.config import ConfigError
from speechlm.config.augment import AugmentConfig

log = logging.getLogger(__name__)

# the transforms' rows in ClipDraws, in this order; append new ones at the end (keeps old draws)
STREAMS = ("speed", "reverb", "noise", "gain", "bandlimit", "clipping", "codec", "spec")
PARAMS = 6  # uniforms per transform and clip: [0] decides whether it fires, the rest its parameters
AUDIO_EXTENSIONS = {".wav", ".flac", ".ogg", ".opus", ".mp3", ".aiff", ".aif", ".au", ".caf", ".w64", ".rf64"}
CODECS = {"mp3": ("MP3", "MPEG_LAYER_III"), "opus": ("OGG", "OPUS"), "vorbis": ("OGG", "VORBIS")}
NOISE_BANK = 1 << 20  # generated noise per colour and worker: 65 s, 4 MiB
RIR_CACHE = 512  # decoded RIRs kept per worker (a few seconds each at most)
COLOR_EXPONENT = {"white": 0.0, "pink": 1.0, "brown": 2.0}  # power spectrum ~ 1 / f^exponent


class ClipDraws:
    """The random draws of one clip in one epoch, from a stable hash of (seed, epoch, clip id) (not
    Python's salted hash()) as the key of Philox, a counter-based generator.

    Counter block 0 gives a fixed table of PARAMS uniforms per transform (`fires`, `uniform`, `pick`):
    one small draw per clip however many transforms are on, and a transform's draws do not move when
    another is turned on or off. A transform that needs many numbers (a synthetic RIR's tail, masks)
    gets a Generator of its own, `draws[name]`, whose counter starts at its index + 1 in the top word,
    so no two ever overlap. (A SeedSequence per transform cost more than mixing the noise.)"""

    def __init__(self, seed: int, epoch: int, clip_id: str):
        digest = hashlib.blake2b(f"{int(seed)}:{int(epoch)}:{clip_id}".encode(), digest_size=16).digest()
        self.key = np.frombuffer(digest, dtype=np.uint64)
        self.table = np.random.Generator(np.random.Philox(key=self.key)).random((len(STREAMS), PARAMS))

    def __getitem__(self, name: str) -> np.random.Generator:
        counter = np.array([0, 0, 0, STREAMS.index(name) + 1], dtype=np.uint64)
        return np.random.Generator(np.random.Philox(counter=counter, key=self.key))

    def fires(self, name: str, prob: float) -> bool:
        return bool(self.table[STREAMS.index(name), 0] < prob)

    def uniform(self, name: str, k: int, r) -> float:
        """Parameter k (1..PARAMS-1) of a transform, uniform in the range r = [low, high]."""
        return float(r[0] + self.table[STREAMS.index(name), k] * (r[1] - r[0]))

    def pick(self, name: str, k: int, options):
        """Parameter k of a transform: one of `options` (or an index below `options` when it is an int)."""
        n = options if isinstance(options, int) else len(options)
        i = min(int(self.table[STREAMS.index(name), k] * n), n - 1)
        return i if isinstance(options, int) else options[i]


def _fit(x: np.ndarray, n: int) -> np.ndarray:
    """Exactly n samples: cut, or pad with zeros."""
    return x[:n] if len(x) >= n else np.pad(x, (0, n - len(x)))


def _power(x: np.ndarray) -> float:
    x = np.asarray(x, dtype=np.float32).ravel()
    return float(np.dot(x, x)) / x.size if x.size else 0.0  # BLAS: 10x cheaper than a float64 square


# ---------------------------------------------------------------------------------- transforms


def speed(wave: np.ndarray, factor: float) -> np.ndarray:
    """Play `factor` times as fast (pitch moves with it, as sox's `speed`): len(wave) / factor samples."""
    if factor == 1.0:
        return wave
    # reading 16 kHz samples as if recorded at 16 kHz * factor, then resampling to 16 kHz
    return soxr.resample(wave, SAMPLE_RATE * factor, SAMPLE_RATE, quality="HQ").astype(np.float32)


def coloured_noise(n: int, color: str, rng: np.random.Generator) -> np.ndarray:
    """Gaussian noise of n samples with a 1 / f^k power spectrum (white k=0, pink 1, brown 2); unit power."""
    white = rng.standard_normal(n)
    k = COLOR_EXPONENT[color]
    if k:
        spec = np.fft.rfft(white)
        f = np.arange(len(spec), dtype=np.float64)
        f[0] = f[1] if len(f) > 1 else 1.0  # no infinite DC gain
        white = np.fft.irfft(spec / f ** (k / 2), n)
    p = _power(white)
    return (white / np.sqrt(p) if p > 0 else white).astype(np.float32)


def cyclic(a: np.ndarray, start: int, n: int) -> np.ndarray:
    """n samples of `a` from `start`, wrapping around (a periodic signal continues seamlessly)."""
    start %= len(a)
    out = a[start : start + n]
    return out if len(out) == n else np.concatenate([out, np.resize(a, n - len(out))])


def mix_at_snr(wave: np.ndarray, noise: np.ndarray, snr_db: float) -> np.ndarray:
    """wave + noise scaled so that power(wave) / power(scaled noise) is snr_db; noise is cut or tiled to the wave."""
    noise = np.resize(noise, len(wave)) if len(noise) != len(wave) else noise
    ps, pn = _power(wave), _power(noise)
    if ps <= 0 or pn <= 0:
        return wave  # SNR is undefined against silence
    return (wave + noise * np.sqrt(ps / (pn * 10 ** (snr_db / 10)))).astype(np.float32)


def synthetic_rir(rng: np.random.Generator, rt60_s: float, drr_db: float) -> np.ndarray:
    """A direct path of 1 at lag 0, then exponentially decaying Gaussian noise (60 dB down at rt60_s)
    whose energy is drr_db below the direct path's."""
    n = max(2, int(rt60_s * SAMPLE_RATE))
    t = np.arange(1, n) / SAMPLE_RATE
    tail = rng.standard_normal(n - 1) * np.exp(-6.9078 * t / rt60_s)  # ln(1000): 60 dB in amplitude
    tail *= np.sqrt(10 ** (-drr_db / 10) / max(_power(tail) * len(tail), 1e-12))
    return np.concatenate([[1.0], tail]).astype(np.float32)


def fft_convolve(x: np.ndarray, h: np.ndarray) -> np.ndarray:
    """The first len(x) samples of x * h, by overlap-add with FFTs of ~4 len(h): they stay in cache,
    2-3x cheaper than one FFT over a whole clip (measured here; 2 or 8 len(h) were slower)."""
    m = len(h)
    # one block when the whole result fits in that size (short clips, long rooms)
    size = 1 << int(np.ceil(np.log2(max(min(4 * m, len(x) + m - 1), 256))))
    step = size - m + 1
    nb = -(-len(x) // step)
    blocks = np.zeros((nb, step), dtype=np.float32)
    blocks.reshape(-1)[: len(x)] = x
    parts = np.fft.irfft(np.fft.rfft(blocks, size, axis=1) * np.fft.rfft(h, size), size, axis=1)
    out = np.zeros(nb * step + size, dtype=np.float64)
    for i in range(nb):
        out[i * step : i * step + size] += parts[i]
    return out[: len(x)]


def reverberate(wave: np.ndarray, rir: np.ndarray) -> np.ndarray:
    """Convolve with `rir`, aligned at its strongest tap (the direct path), cut to the input's length,
    at the input's level."""
    rir = np.asarray(rir, dtype=np.float32)
    out = fft_convolve(wave, rir[int(np.argmax(np.abs(rir))) :])
    ps, po = _power(wave), _power(out)
    return (out * np.sqrt(ps / po) if po > 0 else out).astype(np.float32)


def bandlimit(wave: np.ndarray, rate: int) -> np.ndarray:
    """Through `rate` Hz and back: nothing above rate / 2 is left (a telephone line at 8000)."""
    low = soxr.resample(wave, SAMPLE_RATE, rate, quality="HQ")
    return _fit(soxr.resample(low, rate, SAMPLE_RATE, quality="HQ"), len(wave)).astype(np.float32)


def clip_peaks(wave: np.ndarray, level: float) -> np.ndarray:
    """Hard clipping at `level` times the clip's peak."""
    t = float(np.max(np.abs(wave))) * level if wave.size else 0.0
    return np.clip(wave, -t, t) if t > 0 else wave


def codec(wave: np.ndarray, name: str, compression: float) -> np.ndarray:
    """Encode with libsndfile's lossy codec `name` and decode again; same length."""
    fmt, sub = CODECS[name]
    buf = io.BytesIO()
    sf.write(buf, np.clip(wave, -1.0, 1.0), SAMPLE_RATE, format=fmt, subtype=sub, compression_level=compression)
    buf.seek(0)
    out, sr = sf.read(buf, dtype="float32", always_2d=False)
    return _fit(audio_io.to_mono_16k(out, sr), len(wave))


def spec_masks(
    feats: torch.Tensor, frames: int, rng: np.random.Generator, cfg, frames_per_second: float, num_mel_bins: int
) -> torch.Tensor:
    """SpecAugment on one clip's features [T, F] (first `frames` real), in place: `cfg.time_masks` spans of
    up to time_mask_max_s, `cfg.freq_masks` bands of up to freq_mask_max_bins mel bins. F holds blocks
    of num_mel_bins (Granite: mel and delta of two stacked frames), so a band masks the same bins in
    every block. Masked values are the clip's mean of that feature (what zero is after mean normalization)."""
    if frames <= 0:
        return feats
    fill = feats[:frames].mean(dim=0)
    max_t = int(cfg.time_mask_max_s * frames_per_second)
    for _ in range(cfg.time_masks):
        w = int(rng.integers(0, max_t + 1))
        t0 = int(rng.integers(0, max(1, frames - w + 1)))
        feats[t0 : t0 + w] = fill
    blocks = feats.shape[-1] // num_mel_bins
    for _ in range(cfg.freq_masks):
        w = int(rng.integers(0, min(cfg.freq_mask_max_bins, num_mel_bins) + 1))
        f0 = int(rng.integers(0, num_mel_bins - w + 1))
        for b in range(blocks):
            cols = slice(b * num_mel_bins + f0, b * num_mel_bins + f0 + w)
            feats[:frames, cols] = fill[cols]
    return feats


# ---------------------------------------------------------------------------------- folders


def list_audio(folder: str | None, key: str) -> list[str]:
    """Sorted audio files under `folder` (recursively), or a ConfigError naming `key`."""
    if folder is None:
        return []
    p = Path(folder).expanduser()
    if not p.is_dir():
        raise ConfigError(f"{key}: no such folder '{folder}'")
    files = sorted(str(f) for f in p.rglob("*") if f.suffix.lower() in AUDIO_EXTENSIONS and f.is_file())
    if not files:
        raise ConfigError(f"{key}: no audio files in '{folder}' (looked for {', '.join(sorted(AUDIO_EXTENSIONS))})")
    return files


def check_codecs(formats: list[str], key: str) -> None:
    for i, name in enumerate(formats):
        fmt, sub = CODECS[name]
        if sub not in sf.available_subtypes(fmt):
            has = ", ".join(n for n, (f, s) in CODECS.items() if s in sf.available_subtypes(f)) or "no lossy codec"
            raise ConfigError(
                f"{key}[{i}]: this machine's libsndfile ({sf.__libsndfile_version__}) cannot write {name}; it has {has}"
            )


class Augmenter:
    """`augmenter(wave, epoch, clip_id)` -> the augmented clip. Picklable (DataLoader workers); files
    are read in the worker that needs them."""

    def __init__(self, cfg: AugmentConfig, seed: int, key: str = "data.augment"):
        cfg.validate(key)
        self.cfg, self.seed = cfg, int(seed)
        on = cfg.enabled
        self.noise_files = list_audio(cfg.noise.dir, f"{key}.noise.dir") if on and cfg.noise.prob > 0 else []
        self.rir_files = list_audio(cfg.reverb.dir, f"{key}.reverb.dir") if on and cfg.reverb.prob > 0 else []
        if on and cfg.codec.prob > 0:
            check_codecs(cfg.codec.formats, f"{key}.codec.formats")
        self.stats: Counter = Counter()
        self._banks: dict[str, np.ndarray] = {}
        self._rirs: dict[int, np.ndarray | None] = {}  # insertion order: oldest evicted first

    def __getstate__(self):
        # workers rebuild the noise banks and RIR cache from the seed and the files, not from a copy
        return dict(self.__dict__, _banks={}, _rirs={}, stats=Counter())

    @property
    def enabled(self) -> bool:
        return self.cfg.enabled

    @property
    def masks_features(self) -> bool:
        return self.cfg.enabled and bool(self.cfg.spec.time_masks or self.cfg.spec.freq_masks)

    @property
    def max_stretch(self) -> float:
        return self.cfg.max_stretch

    def reseeded(self, seed: int) -> Augmenter:
        """This augmenter for a run seed (a resumed reader keeps the seed its state recorded)."""
        if int(seed) == self.seed:
            return self
        other = copy.copy(self)
        other.__dict__.update(self.__getstate__(), seed=int(seed))
        return other

    def __call__(self, wave: np.ndarray, epoch: int, clip_id: str) -> np.ndarray:
        if not self.cfg.enabled:
            return wave
        c, r = self.cfg, ClipDraws(self.seed, epoch, clip_id)
        x = np.asarray(wave, dtype=np.float32)
        if r.fires("speed", c.speed.prob):
            x = speed(x, float(r.pick("speed", 1, c.speed.factors)))
        if r.fires("reverb", c.reverb.prob):
            x = reverberate(x, self._rir(r))
        if r.fires("noise", c.noise.prob):
            x = mix_at_snr(x, self._noise(len(x), r), r.uniform("noise", 1, c.noise.snr_db))
        if r.fires("gain", c.gain.prob):
            x = (x * np.float32(10 ** (r.uniform("gain", 1, c.gain.db) / 20))).astype(np.float32)
        if r.fires("bandlimit", c.bandlimit.prob):
            x = bandlimit(x, int(r.pick("bandlimit", 1, c.bandlimit.sample_rates)))
        if r.fires("clipping", c.clipping.prob):
            x = clip_peaks(x, r.uniform("clipping", 1, c.clipping.level))
        if r.fires("codec", c.codec.prob):
            name, level = str(r.pick("codec", 1, c.codec.formats)), r.uniform("codec", 2, c.codec.compression)
            try:
                x = codec(x, name, level)
            except (sf.LibsndfileError, RuntimeError) as e:
                self._skip("codec_errors", f"{name} round trip of {clip_id} failed ({e}): kept without the codec")
        return np.ascontiguousarray(x, dtype=np.float32)

    def spec(self, feats: torch.Tensor, frames: int, epoch: int, clip_id: str, features) -> torch.Tensor:
        """SpecAugment masks for one clip's features (`features`: the family's extractor)."""
        if not self.masks_features:
            return feats
        s = self.cfg.spec
        rng = ClipDraws(self.seed, epoch, clip_id)["spec"]
        return spec_masks(feats, frames, rng, s, features.frames_per_second, features.num_mel_bins)

    # ------------------------------------------------------------------------------ sources

    def _skip(self, what: str, msg: str) -> None:
        self.stats[what] += 1
        log.warning(msg)

    def _bank(self, color: str) -> np.ndarray:
        """NOISE_BANK samples of one colour, from the run seed alone: the same in every worker.
        Made once per worker; a clip reads a stretch at a drawn offset (FFT noise is periodic, so it
        wraps without a seam). Generating noise per clip cost more than the clip's features."""
        if color not in self._banks:
            rng = np.random.default_rng([int(self.seed) & 0xFFFFFFFF, list(COLOR_EXPONENT).index(color), 0x6E6F6973])
            self._banks[color] = coloured_noise(NOISE_BANK, color, rng)
        return self._banks[color]

    def _noise(self, n: int, r: ClipDraws) -> np.ndarray:
        color = str(r.pick("noise", 2, self.cfg.noise.colors))
        start = r.uniform("noise", 4, [0.0, 1.0])  # where the stretch starts, as a fraction of the free range
        if self.noise_files:
            path = self.noise_files[r.pick("noise", 3, len(self.noise_files))]
            try:
                with sf.SoundFile(path) as f:
                    sr, total = f.samplerate, f.frames
                    need = min(total, int(np.ceil(n * sr / SAMPLE_RATE)) + 1)
                    f.seek(int(start * (total - need + 1)) if total > need else 0)
                    seg = audio_io.to_mono_16k(f.read(need, dtype="float32", always_2d=False), sr)
                if seg.size == 0 or not np.isfinite(seg).all():
                    raise audio_io.AudioError("no usable samples")
                return np.resize(seg, n)
            except (sf.LibsndfileError, RuntimeError, audio_io.AudioError, OSError) as e:
                self._skip("bad_noise_files", f"noise file {path} is unusable ({e}): generated {color} noise instead")
        return cyclic(self._bank(color), int(start * NOISE_BANK), n)

    def _rir(self, r: ClipDraws) -> np.ndarray:
        if self.rir_files:
            i = r.pick("reverb", 3, len(self.rir_files))
            if i not in self._rirs:
                if len(self._rirs) >= RIR_CACHE:
                    self._rirs.pop(next(iter(self._rirs)))
                try:
                    self._rirs[i] = audio_io.load(self.rir_files[i])
                except (audio_io.AudioError, OSError) as e:
                    self._skip(
                        "bad_rir_files", f"RIR file {self.rir_files[i]} is unusable ({e}): synthetic RIRs instead"
                    )
                    self._rirs[i] = None  # remembered, so it is logged once per worker
            if self._rirs[i] is not None:
                return self._rirs[i]
        # synthetic, from this clip's draws (never from a cache another clip filled)
        return synthetic_rir(
            r["reverb"], r.uniform("reverb", 1, self.cfg.reverb.rt60_s), r.uniform("reverb", 2, self.cfg.reverb.drr_db)
        )


__all__ = [
    "Augmenter",
    "ClipDraws",
    "bandlimit",
    "clip_peaks",
    "codec",
    "coloured_noise",
    "cyclic",
    "fft_convolve",
    "list_audio",
    "mix_at_snr",
    "reverberate",
    "spec_masks",
    "speed",
    "synthetic_rir",
]
