"""Sources: list a split's input units and their rows (first pass) and fetch audio (in a worker).

A unit is one input file of a split (a streamed parquet data file, a manifest file, a LibriSpeech
sub-folder, a map-mode dataset split, the synthetic split): what one build task reads, and the
group its shards are cut from. A row is (orig_id, raw text, audio ref, filter fields). The ref is
what a worker needs to get the audio: a file path (manifest, librispeech), a row index in the
unit's parquet file (hf streaming), a (dataset split, row index) pair (hf map mode), or a
synthesis spec (synthetic). Listing reads text only, so it stays cheap on large datasets.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from speechlm import audio
from speechlm.config import ConfigError
from speechlm.shard import builtin, hfstream
from speechlm.shard.schema import SPLITS, Source


def source_splits(src: Source) -> list[str]:
    if src.kind == "synthetic":
        return [s for s in SPLITS if getattr(src.synthetic, s) > 0]
    return [s for s in SPLITS if s in src.splits]


def streams(src: Source) -> bool:
    """Whether an hf source is read file by file (see hfstream) rather than through load_dataset."""
    if src.kind != "hf":
        return False
    if src.stream is None:
        return not hfstream.is_saved_dataset(src.path)  # a save_to_disk folder is read in place
    if src.stream and hfstream.is_saved_dataset(src.path):
        raise ConfigError(f"{src.name}: stream: true reads parquet data files; {src.path} is a save_to_disk "
                          "folder (read in place by default: remove stream)")
    return src.stream


def list_units(src: Source, split: str, key: str) -> list[dict]:
    """The split's units in a fixed order: {"label", "rows": [(oid, text, ref, fields)]}, plus
    "file" and "groups" (rows per parquet row group) for a streamed hf unit."""
    if src.kind == "synthetic":
        return [{"label": "synthetic", "rows": [(o, t, r, {}) for o, t, r in builtin.rows(src.synthetic, split)]}]
    key = f"{key}.splits.{split}"
    if streams(src):
        return _hf_stream_units(src, split, key)
    lister = {"hf": _hf_rows, "manifest": _manifest_rows, "librispeech": _librispeech_rows}[src.kind]
    return [{"label": item, "rows": lister(src, item, key)} for item in src.splits[split]]


def fetch(src: Source, ref) -> np.ndarray:
    """16 kHz mono float32 audio for a row (not a streamed one); AudioError when it cannot be had."""
    if src.kind == "synthetic":
        return builtin.synthesize(ref)
    if src.kind == "hf":
        ds_split, idx = ref
        return hfstream.decode_cell(_open_hf_audio(src, ds_split)[idx][src.audio_column])
    return audio.load(ref)


def _fields(record: dict, src: Source) -> dict:
    return {f.column: record.get(f.column) for f in src.filters}


# --------------------------------------------------------------------------- manifest files


def _resolve(src: Source, name: str) -> Path:
    p = Path(name).expanduser()
    return p if p.is_absolute() or not src.path else Path(src.path).expanduser() / p


def _not_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
        return False
    except UnicodeEncodeError:  # surrogate escapes stand for bytes that were not UTF-8
        return True


def _manifest_rows(src: Source, name: str, key: str):
    """JSONL (one object per line) or TSV (with a header row): audio path, text, optional id."""
    path = _resolve(src, name)
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
            raise ConfigError(f"{path}:{line}: no '{src.audio_column}' field ({key[: key.index('.splits')]}.audio_column)")
        apath = Path(r[src.audio_column]).expanduser()
        apath = apath if apath.is_absolute() else path.parent / apath
        oid = r.get(src.id_column) if src.id_column else None
        text = (r.get(src.text_column) if src.text_column else None) or ""
        if isinstance(text, str) and _not_utf8(text):
            text = None  # the pipeline counts it as a drop (text_not_utf8) rather than guess the bytes
        rows.append((str(oid) if oid not in (None, "") else apath.stem, text, str(apath), _fields(r, src)))
    return rows


# --------------------------------------------------------------------------- librispeech


def _librispeech_rows(src: Source, sub: str, key: str):
    """`*.trans.txt` files ("ID TEXT" per line) beside `ID.flac` files, anywhere under the folder."""
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


# --------------------------------------------------------------------------- hf datasets

_OPEN: dict = {}  # per process: (source, split) -> dataset with only the audio column


def _open_hf(src: Source, ds_split: str, key: str = ""):
    import datasets

    p = Path(src.path).expanduser()
    try:
        if hfstream.is_saved_dataset(src.path):
            ds = datasets.load_from_disk(str(p))
            if isinstance(ds, datasets.DatasetDict):
                if ds_split not in ds:
                    raise ConfigError(f"{key}: {p} has no split {ds_split!r} (it has {', '.join(ds)})")
                ds = ds[ds_split]
        else:
            ds = datasets.load_dataset(src.path, name=src.subset, split=ds_split, cache_dir=src.cache_dir)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - datasets raises many types for a bad id/split/path
        raise ConfigError(f"{key}: cannot load {src.path!r} split {ds_split!r}: {type(e).__name__}: {e}") from None
    for col in (src.audio_column, src.text_column, src.id_column, *(f.column for f in src.filters)):
        if col and col not in ds.column_names:
            raise ConfigError(f"{key}: {src.path} has no column {col!r} (columns: {', '.join(ds.column_names)})")
    # decoding through datasets needs torchcodec (pitfall 13): take the bytes, decode with soundfile
    if isinstance(ds.features[src.audio_column], datasets.Audio):
        ds = ds.cast_column(src.audio_column, datasets.Audio(decode=False))
    return ds


def _hf_rows(src: Source, ds_split: str, key: str):
    ds = _open_hf(src, ds_split, key)
    cols = _light(src)
    table = ds.select_columns(cols).to_dict() if cols else {}
    return _rows_of(src, table, len(ds), ds_split, 0, lambda i: (ds_split, i))


def _light(src: Source) -> list[str]:
    """The columns the first pass reads: ids, labels, filter columns (never the audio)."""
    return list(dict.fromkeys(c for c in (src.text_column, src.id_column, *(f.column for f in src.filters)) if c))


def _rows_of(src: Source, cols: dict, n: int, ds_split: str, first: int, ref) -> list:
    texts = cols[src.text_column] if src.text_column else [""] * n
    ids = [str(x) for x in cols[src.id_column]] if src.id_column else [f"{ds_split}-{first + i:08d}" for i in range(n)]
    return [(oid, text or "", ref(i), {f.column: cols[f.column][i] for f in src.filters})
            for i, (oid, text) in enumerate(zip(ids, texts))]


def _hf_stream_units(src: Source, split: str, key: str) -> list[dict]:
    units, first = [], 0
    for ds_split in src.splits[split]:
        first = 0  # ids without an id column count rows across the dataset split's files
        for url in hfstream.data_files(src, ds_split, key):
            cols, groups = hfstream.light_columns(url, _light(src), src.audio_column, key)
            n = sum(groups)
            units.append({"label": url, "file": url, "groups": groups,
                          "rows": _rows_of(src, cols, n, ds_split, first, lambda i: i)})
            first += n
    return units


def _open_hf_audio(src: Source, ds_split: str):
    k = (src.name, src.path, src.subset, ds_split)
    if k not in _OPEN:
        _OPEN[k] = _open_hf(src, ds_split).select_columns([src.audio_column])
    return _OPEN[k]
