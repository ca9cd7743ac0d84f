"""kind: librispeech, LibriSpeech-style folders: `*.trans.txt` files ("ID TEXT" per line) beside
`ID.flac` files, anywhere under each split's sub-folders of `path`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from speechlm import audio
from speechlm.config import ConfigError
from speechlm.shard.sources.base import SourceType, folder_digest, register


class LibriSpeech(SourceType):
    kind = "librispeech"
    needs_path = True

    def list_units(self, src, split: str, key: str) -> list[dict]:
        return [{"label": sub, "rows": self._rows(src, sub, f"{key}.splits.{split}")} for sub in src.splits[split]]

    @staticmethod
    def _rows(src, sub: str, key: str) -> list:
        root = Path(src.path).expanduser() / sub
        trans = sorted(root.rglob("*.trans.txt"))
        if not trans:
            raise ConfigError(f"{key}: no *.trans.txt files under {root}")
        rows = []
        for t in trans:
            for line in t.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    oid, _, text = line.strip().partition(" ")
                    rows.append((oid, text, str(t.parent / f"{oid}.flac"), {}))
        return rows

    def fetch(self, src, ref) -> np.ndarray:
        return audio.load(ref)

    def inputs(self, src, key: str) -> dict[str, str]:
        """Each split's sub-folder: its files with their sizes and mtimes."""
        return {sub: folder_digest(Path(src.path) / sub) for subs in src.splits.values() for sub in subs}


register(LibriSpeech())
