"""kind: manifest, JSONL (one object per line) or TSV (with a header row) files listing an audio
path, a text and optionally an id per row; each file is one unit. Relative file names resolve
against `path`, relative audio paths against their manifest file's folder."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from speechlm import audio
from speechlm.config import ConfigError
from speechlm.shard.sources.base import SourceType, fields, register


def _not_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
        return False
    except UnicodeEncodeError:  # surrogate escapes stand for bytes that were not UTF-8
        return True


class Manifest(SourceType):
    kind = "manifest"
    has_columns = True

    def list_units(self, src, split: str, key: str) -> list[dict]:
        return [
            {"label": name, "rows": self._rows(src, name, f"{key}.splits.{split}", key)} for name in src.splits[split]
        ]

    @staticmethod
    def _rows(src, name: str, key: str, src_key: str) -> list:
        p = Path(name).expanduser()
        path = p if p.is_absolute() or not src.path else Path(src.path).expanduser() / p
        if not path.is_file():
            raise ConfigError(f"{key}: manifest file not found: {path}")
        if path.suffix in (".tsv", ".txt"):
            with open(path, newline="", encoding="utf-8", errors="surrogateescape") as f:  # bad bytes: a counted drop
                records = [(i + 2, r) for i, r in enumerate(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))]
        else:
            records = []
            for i, line in enumerate(path.read_text(encoding="utf-8", errors="surrogateescape").splitlines()):
                if line.strip():
                    try:
                        records.append((i + 1, json.loads(line)))
                    except json.JSONDecodeError as e:
                        raise ConfigError(f"{path}:{i + 1}: not valid JSON ({e.msg})") from None
        rows = []
        for line, r in records:
            if not isinstance(r, dict) or not r.get(src.audio_column):
                raise ConfigError(f"{path}:{line}: no '{src.audio_column}' field ({src_key}.audio_column)")
            apath = Path(r[src.audio_column]).expanduser()
            apath = apath if apath.is_absolute() else path.parent / apath
            oid = r.get(src.id_column) if src.id_column else None
            text = (r.get(src.text_column) if src.text_column else None) or ""
            if isinstance(text, str) and _not_utf8(text):
                text = None  # the listing counts it as a drop (text_not_utf8) rather than guess the bytes
            rows.append((str(oid) if oid not in (None, "") else apath.stem, text, str(apath), fields(r, src)))
        return rows

    def fetch(self, src, ref) -> np.ndarray:
        return audio.load(ref)


register(Manifest())
