"""The `data.augment` section: on-the-fly training augmentation (speechlm.data.augment applies it).

Every transform has a probability per clip (`prob`) and ranges written as `[low, high]`, drawn
uniformly. Everything is off unless `enabled: true`. `validate(prefix)` checks values only; the
folders (noise, RIRs) and the codecs are checked by `speechlm.data.augment.Augmenter`, which the
trainer builds before any process group starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal

from speechlm.audio_checks import MIN_SAMPLE_RATE, SAMPLE_RATE
from speechlm.config.errors import ConfigError


@dataclass
class SpeedAugment:
    # with probability `prob`, a factor drawn uniformly from the list: 1.1 plays 10% faster (a shorter
    # clip); [1.0] is off. The planner counts the longest clip at the smallest factor.
    factors: list[float] = field(default_factory=lambda: [1.0])
    prob: float = 1.0


@dataclass
class NoiseAugment:
    prob: float = 0.0
    snr_db: list[float] = field(default_factory=lambda: [10.0, 30.0])
    # a folder of noise clips (searched recursively; any format speechlm.audio reads), or null:
    # generated coloured noise of one of `colors`
    dir: str | None = None
    colors: list[Literal["white", "pink", "brown"]] = field(default_factory=lambda: ["white", "pink", "brown"])


@dataclass
class ReverbAugment:
    prob: float = 0.0
    # a folder of room impulse responses, or null: synthetic ones (exponentially decaying noise
    # after a direct path) with a reverberation time and a direct-to-reverberant ratio drawn from these
    dir: str | None = None
    rt60_s: list[float] = field(default_factory=lambda: [0.2, 0.8])
    drr_db: list[float] = field(default_factory=lambda: [0.0, 10.0])


@dataclass
class GainAugment:
    prob: float = 0.0
    db: list[float] = field(default_factory=lambda: [-6.0, 6.0])


@dataclass
class ClipAugment:
    prob: float = 0.0
    # the clipping threshold as a fraction of the clip's peak
    level: list[float] = field(default_factory=lambda: [0.3, 0.8])


@dataclass
class BandLimitAugment:
    prob: float = 0.0
    # resampled down to one of these rates and back to 16 kHz (telephone: 8000)
    sample_rates: list[int] = field(default_factory=lambda: [8000])


@dataclass
class CodecAugment:
    prob: float = 0.0
    # through libsndfile: mp3 (MPEG layer III), opus and vorbis (in OGG)
    formats: list[Literal["mp3", "opus", "vorbis"]] = field(default_factory=lambda: ["mp3", "vorbis"])
    # libsndfile's compression_level: 0 best quality, 1 smallest file
    compression: list[float] = field(default_factory=lambda: [0.3, 0.9])


@dataclass
class SpecAugmentConfig:
    # masks on the encoder's input features (time and mel bins), after the collator's extractor
    time_masks: int = 0
    time_mask_max_s: float = 0.1
    freq_masks: int = 0
    freq_mask_max_bins: int = 10


@dataclass
class AugmentConfig:
    enabled: bool = False
    speed: SpeedAugment = field(default_factory=SpeedAugment)
    reverb: ReverbAugment = field(default_factory=ReverbAugment)
    noise: NoiseAugment = field(default_factory=NoiseAugment)
    gain: GainAugment = field(default_factory=GainAugment)
    bandlimit: BandLimitAugment = field(default_factory=BandLimitAugment)
    clipping: ClipAugment = field(default_factory=ClipAugment)
    codec: CodecAugment = field(default_factory=CodecAugment)
    spec: SpecAugmentConfig = field(default_factory=SpecAugmentConfig)

    @property
    def max_stretch(self) -> float:
        """How much longer the longest clip can get (1 / the smallest speed factor)."""
        return 1.0 / min(self.speed.factors) if self.enabled and self.speed.prob > 0 else 1.0

    def validate(self, prefix: str = "data.augment") -> None:
        """Value checks (no files): a ConfigError naming the key."""
        if not self.speed.factors:
            raise ConfigError(f"{prefix}.speed.factors: empty (use [1.0] for no speed change)")
        for i, f in enumerate(self.speed.factors):
            if not f > 0:
                raise ConfigError(f"{prefix}.speed.factors[{i}]: a speed factor must be > 0, got {f}")
        for name in ("speed", "reverb", "noise", "gain", "bandlimit", "clipping", "codec"):
            p = getattr(self, name).prob
            if not 0.0 <= p <= 1.0:
                raise ConfigError(f"{prefix}.{name}.prob: a probability in [0, 1], got {p}")
        _range(f"{prefix}.noise.snr_db", self.noise.snr_db)
        _range(f"{prefix}.reverb.rt60_s", self.reverb.rt60_s, low=0.0, strict=True)
        _range(f"{prefix}.reverb.drr_db", self.reverb.drr_db)
        _range(f"{prefix}.gain.db", self.gain.db)
        _range(f"{prefix}.clipping.level", self.clipping.level, low=0.0, high=1.0, strict=True)
        _range(f"{prefix}.codec.compression", self.codec.compression, low=0.0, high=1.0)
        for key, seq in (
            (f"{prefix}.noise.colors", self.noise.colors),
            (f"{prefix}.codec.formats", self.codec.formats),
            (f"{prefix}.bandlimit.sample_rates", self.bandlimit.sample_rates),
        ):
            if not seq:
                raise ConfigError(f"{key}: empty (give at least one, or set the transform's prob to 0)")
        for i, r in enumerate(self.bandlimit.sample_rates):
            if not MIN_SAMPLE_RATE <= r < SAMPLE_RATE:
                raise ConfigError(
                    f"{prefix}.bandlimit.sample_rates[{i}]: a rate in [{MIN_SAMPLE_RATE}, {SAMPLE_RATE}) Hz, got {r}"
                )
        s = self.spec
        for key in ("time_masks", "freq_masks", "freq_mask_max_bins"):
            if getattr(s, key) < 0:
                raise ConfigError(f"{prefix}.spec.{key}: must be >= 0, got {getattr(s, key)}")
        if not s.time_mask_max_s >= 0:
            raise ConfigError(f"{prefix}.spec.time_mask_max_s: must be >= 0, got {s.time_mask_max_s}")

    def active(self) -> list[str]:
        """Names of the transforms that can change a clip (for logs)."""
        if not self.enabled:
            return []
        out = ["speed"] if self.speed.prob > 0 and any(f != 1.0 for f in self.speed.factors) else []
        out += [
            f.name
            for f in fields(self)
            if f.name not in ("enabled", "speed", "spec") and getattr(self, f.name).prob > 0
        ]
        if self.spec.time_masks or self.spec.freq_masks:
            out.append("spec")
        return out


def _range(key: str, r: list[float], low: float | None = None, high: float | None = None, strict: bool = False) -> None:
    if len(r) != 2:
        raise ConfigError(f"{key}: a range [low, high], got {r!r}")
    lo, hi = r
    if not lo <= hi:
        raise ConfigError(f"{key}: the range is upside down ({lo} > {hi}); write it as [low, high]")
    if low is not None and (lo <= low if strict else lo < low):
        raise ConfigError(f"{key}: must be {'>' if strict else '>='} {low}, got {lo}")
    if high is not None and hi > high:
        raise ConfigError(f"{key}: must be <= {high}, got {hi}")


__all__ = [
    "AugmentConfig",
    "BandLimitAugment",
    "ClipAugment",
    "CodecAugment",
    "GainAugment",
    "NoiseAugment",
    "ReverbAugment",
    "SpecAugmentConfig",
    "SpeedAugment",
]
