"""kind: synthetic, the built-in espeak-ng corpora (speechlm.demo.builtin): no files, no splits
to name; the split sizes, voices and seed are the source's `synthetic:` section (SyntheticConfig).
Registered by the demo's plug-in (speechlm.demo.plugin)."""

from __future__ import annotations

import numpy as np

from speechlm.config import ConfigError
from speechlm.demo import builtin, grammar
from speechlm.demo.grammar import SyntheticConfig
from speechlm.shard.sources.base import SPLITS, SourceType


class Synthetic(SourceType):
    kind = "synthetic"
    section = "synthetic"
    settings_class = SyntheticConfig

    def validate(self, src, key: str) -> None:
        s = self.settings(src)
        if not 0 <= s.unseen_test <= s.test:
            raise ConfigError(
                f"{key}.synthetic.unseen_test: must be between 0 and {key}.synthetic.test "
                f"({s.test}), got {s.unseen_test}"
            )
        if s.corpus == "listen":
            if not 0 <= s.random_share <= 1:
                raise ConfigError(f"{key}.synthetic.random_share: must be between 0 and 1, got {s.random_share}")
            if s.random_test < 0 or s.random_test + s.unseen_test > s.test:
                raise ConfigError(
                    f"{key}.synthetic.random_test: random_test + unseen_test must be at most "
                    f"test ({s.test}), got {s.random_test} + {s.unseen_test}"
                )
        if not 0 <= s.silence_seconds <= 5:
            raise ConfigError(f"{key}.synthetic.silence_seconds: must be between 0 and 5, got {s.silence_seconds}")
        if s.corpus == "nonspeech" and s.silence_seconds:
            raise ConfigError(f"{key}.synthetic.silence_seconds: a nonspeech corpus is silence and noise already")
        if s.corpus == "nonspeech" and not src.keep_empty:
            raise ConfigError(f"{key}.keep_empty: a nonspeech corpus has empty labels and needs keep_empty: true")
        if src.stream is not None:
            raise ConfigError(f"{key}.stream: only an hf source streams (kind is '{self.kind}')")
        if src.filters:
            raise ConfigError(f"{key}.filters: kind '{self.kind}' has no columns to filter on")

    def check(self, src, key: str) -> None:
        grammar.check_espeak(self.settings(src).voices, key)

    def splits(self, src) -> list[str]:
        return [s for s in SPLITS if getattr(self.settings(src), s) > 0]

    def list_units(self, src, split: str, key: str) -> list[dict]:
        return [{"label": "synthetic", "rows": [(o, t, r, {}) for o, t, r in builtin.rows(self.settings(src), split)]}]

    def fetch(self, src, ref) -> np.ndarray:
        return builtin.synthesize(ref)

    def estimate_bytes(self, src: dict) -> int | None:
        return 0  # made on this machine: nothing to download
