"""kind: multilingual, one language of the multilingual listening corpus (speechlm.demo.multilingual):
no files and no splits to name; the language, split sizes, parts, voices and seed are the source's
`multilingual:` section (MultilingualConfig). Each clip's JSON carries `language`, `task` and
`target_text` beside `text`. Registered by the demo's plug-in (speechlm.demo.plugin)."""

from __future__ import annotations

from speechlm.config import ConfigError
from speechlm.demo import builtin, multilingual
from speechlm.shard.sources.base import SPLITS, SourceType


class Multilingual(SourceType):
    kind = "multilingual"
    section = "multilingual"
    settings_class = multilingual.MultilingualConfig

    def validate(self, src, key: str) -> None:
        multilingual.validate(self.settings(src), f"{key}.multilingual")
        if src.splits:
            raise ConfigError(
                f"{key}.splits: kind '{self.kind}' makes its splits; set {key}.multilingual.train/eval/test"
            )
        if src.stream is not None:
            raise ConfigError(f"{key}.stream: only an hf source streams (kind is '{self.kind}')")
        if src.filters:
            raise ConfigError(f"{key}.filters: kind '{self.kind}' has no columns to filter on")

    def check(self, src, key: str) -> None:
        s = self.settings(src)
        said = [t for rows in multilingual.texts(s).values() for _, t, _ in rows]
        voices = s.voices or multilingual.VOICES[s.language]
        multilingual.check_voices(s.language, voices, said, f"{key}.multilingual")

    def splits(self, src) -> list[str]:
        return [s for s in SPLITS if getattr(self.settings(src), s) > 0]

    def list_units(self, src, split: str, key: str) -> list[dict]:
        rows = multilingual.rows(self.settings(src), split)
        return [{"label": "multilingual", "rows": [(o, t, r, {}) for o, t, r in rows]}]

    def fetch(self, src, ref):
        return builtin.synthesize(ref["audio"]), dict(ref["labels"])

    def estimate_bytes(self, src: dict) -> int | None:
        return 0  # made on this machine: nothing to download
