"""kind: timed, a test set with true word times (speechlm.demo.timed): espeak-ng words spoken one by
one and joined with measured silences. No files and no splits to name; the clip counts, word pools,
voices and silences are the source's `timed:` section (TimedConfig). Its clips' JSON carries `"words"`:
[{"text", "start", "end"}] in seconds beside `"text"`. Registered by the demo's plug-in (speechlm.demo.plugin)."""

from __future__ import annotations

from speechlm.config import ConfigError
from speechlm.demo import timed
from speechlm.shard.sources.base import SPLITS, SourceType


class Timed(SourceType):
    kind = "timed"
    section = "timed"
    settings_class = timed.TimedConfig

    def validate(self, src, key: str) -> None:
        timed.validate(self.settings(src), f"{key}.timed")
        if src.splits:
            raise ConfigError(f"{key}.splits: kind '{self.kind}' makes its splits; set {key}.timed.train/eval/test")
        if src.stream is not None:
            raise ConfigError(f"{key}.stream: only an hf source streams (kind is '{self.kind}')")
        if src.filters:
            raise ConfigError(f"{key}.filters: kind '{self.kind}' has no columns to filter on")

    def check(self, src, key: str) -> None:
        timed.check_espeak(self.settings(src).voices, f"{key}.timed")

    def splits(self, src) -> list[str]:
        return [s for s in SPLITS if getattr(self.settings(src), s) > 0]

    def list_units(self, src, split: str, key: str) -> list[dict]:
        return [{"label": "timed", "rows": [(o, t, r, {}) for o, t, r in timed.rows(self.settings(src), split)]}]

    def fetch(self, src, ref):
        wave, words = timed.synthesize(ref)
        return wave, {"words": words}

    def estimate_bytes(self, src: dict) -> int | None:
        return 0  # made on this machine: nothing to download
