"""kind: manifest, files listing an audio path, a text and optionally an id per row; each file is one unit.

Formats, by the file's suffix: `.jsonl` (one JSON object per line), `.tsv`/`.txt` (tab-separated, a
header row), `.csv` (comma-separated, a header row, quoting as spreadsheets write it). A split item
that names a folder means Hugging Face's `audiofolder` layout: the folder's `metadata.csv` (or
`metadata.jsonl`), whose `file_name` column is the audio path.

Columns: `audio_column` (default `audio`; `file_name` when the file has no `audio` column but has
that one, as audiofolder's do), `text_column` (default `text`), `id_column` (default none). A column
that no row has is a ConfigError naming it and the columns the file has.

Paths: relative manifest file names resolve against `path`, relative audio paths against their
manifest file's folder. A clip's id is its `id_column` value, else its audio path relative to the
manifest file's folder without the suffix (`spk/a/001`), so equal file names in different folders
are different clips.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from pathlib import Path

import numpy as np

from speechlm import audio
from speechlm.config import ConfigError
from speechlm.shard.sources.base import SourceType, fields, register, stat_digest

AUDIOFOLDER = ("metadata.csv", "metadata.jsonl")  # Hugging Face audiofolder's metadata files
AUDIOFOLDER_COLUMN = "file_name"
TABLES = {".tsv": "\t", ".txt": "\t", ".csv": ","}


def _not_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
        return False
    except UnicodeEncodeError:  # surrogate escapes stand for bytes that were not UTF-8
        return True


def manifest_file(src, name: str, key: str) -> Path:
    """The manifest file a split item names: a file, or an audiofolder folder's metadata file."""
    p = Path(name).expanduser()
    path = p if p.is_absolute() or not src.path else Path(src.path).expanduser() / p
    if path.is_dir():
        found = [path / m for m in AUDIOFOLDER if (path / m).is_file()]
        if not found:
            raise ConfigError(f"{key}: {path} is a folder without {' or '.join(AUDIOFOLDER)} (audiofolder layout)")
        return found[0]
    if not path.is_file():
        raise ConfigError(f"{key}: manifest file not found: {path}")
    return path


def read_records(path: Path) -> tuple[list[tuple[int, dict]], list[str]]:
    """(line number, row) pairs of a JSONL, TSV or CSV file, and the columns its rows have."""
    sep = TABLES.get(path.suffix.lower())
    if sep is not None:
        quoting = csv.QUOTE_NONE if sep == "\t" else csv.QUOTE_MINIMAL
        # bad bytes: a counted drop (text_not_utf8), not a crash
        with open(path, newline="", encoding="utf-8-sig", errors="surrogateescape") as f:
            reader = csv.DictReader(f, delimiter=sep, quoting=quoting)
            records = [(i + 2, r) for i, r in enumerate(reader)]
            return records, [c for c in reader.fieldnames or [] if c]
    records, columns = [], {}  # any other suffix: JSON lines
    for i, line in enumerate(path.read_text(encoding="utf-8-sig", errors="surrogateescape").splitlines()):
        if line.strip():
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise ConfigError(
                    f"{path}:{i + 1}: not valid JSON ({e.msg}); a manifest is read by its suffix: .jsonl (one JSON "
                    "object per line), .csv (comma-separated, header row), .tsv or .txt (tab-separated, header row)"
                ) from None
            if not isinstance(r, dict):
                raise ConfigError(f"{path}:{i + 1}: expected a JSON object per line, got {type(r).__name__}")
            records.append((i + 1, r))
            columns.update(dict.fromkeys(r))
    return records, list(columns)


def audio_column(src, columns: list[str]) -> str:
    """The column holding audio paths: `audio_column`, or audiofolder's `file_name` for the default."""
    if src.audio_column not in columns and src.audio_column == "audio" and AUDIOFOLDER_COLUMN in columns:
        return AUDIOFOLDER_COLUMN
    return src.audio_column


def check_columns(src, path: Path, columns: list[str], src_key: str) -> str:
    """Every column the source names exists in the file; returns the audio column."""
    has = ", ".join(columns) or "none"
    acol = audio_column(src, columns)
    wanted = [("audio_column", acol), ("text_column", src.text_column), ("id_column", src.id_column)]
    wanted += [(f"filters[{j}].column", f.column) for j, f in enumerate(src.filters)]
    wanted += [("language_column", src.language_column), ("target_column", src.target_column)]
    for field, col in wanted:
        if col is not None and col not in columns:
            raise ConfigError(f"{src_key}.{field}: {path} has no column '{col}' (its columns: {has})")
    return acol


def clip_id(apath: Path, base: Path) -> str:
    """The audio path relative to the manifest's folder, without its suffix (`spk/a/001`)."""
    rel = os.path.relpath(apath, base)
    if rel.startswith(".."):  # outside the manifest's folder: the whole path
        rel = str(apath).lstrip("/")
    return Path(rel).with_suffix("").as_posix()


class Manifest(SourceType):
    kind = "manifest"
    has_columns = True

    def list_units(self, src, split: str, key: str) -> list[dict]:
        return [
            {"label": name, "rows": self._rows(src, name, f"{key}.splits.{split}", key)} for name in src.splits[split]
        ]

    @staticmethod
    def _rows(src, name: str, key: str, src_key: str) -> list:
        path = manifest_file(src, name, key)
        records, columns = read_records(path)
        acol = check_columns(src, path, columns, src_key) if records else src.audio_column
        rows = []
        for line, r in records:
            if not r.get(acol):
                raise ConfigError(f"{path}:{line}: no '{acol}' value ({src_key}.audio_column)")
            apath = Path(r[acol]).expanduser()
            apath = apath if apath.is_absolute() else path.parent / apath
            oid = r.get(src.id_column) if src.id_column else None
            text = (r.get(src.text_column) if src.text_column else None) or ""
            if isinstance(text, str) and _not_utf8(text):
                text = None  # the listing counts it as a drop (text_not_utf8) rather than guess the bytes
            oid = str(oid) if oid not in (None, "") else clip_id(apath, path.parent)
            rows.append((oid, text, str(apath), fields(r, src), f"{path.name}:{line}"))
        return rows

    def fetch(self, src, ref) -> np.ndarray:
        return audio.load(ref)

    def inputs(self, src, key: str) -> dict[str, str]:
        """Per manifest file: its bytes, and the size and mtime of every audio file it names."""
        out = {}
        for split, names in src.splits.items():
            for name in names:
                path = manifest_file(src, name, f"{key}.splits.{split}")
                out[name] = hashlib.sha256(path.read_bytes()).hexdigest()
                files = sorted({ref for _, _, ref, _, _ in self._rows(src, name, f"{key}.splits.{split}", key)})
                out[f"{name} (audio files)"] = stat_digest(Path(f) for f in files)
        return out


register(Manifest())
