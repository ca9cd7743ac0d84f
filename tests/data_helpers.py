"""Shard sets for the reader tests, written directly in the manifest format of docs/design.md
(independent of speechlm.shard, so the reader is tested against the documented contract)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np

from speechlm.audio import SAMPLE_RATE, encode_flac


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_set(
    root: Path,
    name: str,
    sizes: list[int],
    *,
    split: str = "train",
    seed: int = 0,
    min_s: float = 0.2,
    max_s: float = 1.2,
    audio: bool = True,
    corrupt: tuple = (),
) -> Path:
    """A shard set of len(sizes) tars with sizes[i] clips of random duration; returns its dir.

    audio=False writes only manifest.json (no tars): a manifest-only set for plan-level tests.
    corrupt: clip numbers whose .flac member holds bytes that are not audio.
    """
    out = Path(root) / name
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    shards, n = [], 0
    for s, size in enumerate(sizes):
        file = f"{name}-{split}-{s:06d}.tar"
        ids, durs = [], []
        tar = tarfile.open(out / file, "w") if audio else None
        for _ in range(size):
            cid = f"{name}.{split}.{n:05d}"  # dots in ids on purpose: keys split at the last dot
            dur = round(float(rng.uniform(min_s, max_s)), 3)
            n += 1
            ids.append(cid)
            durs.append(dur)
            if tar is not None:
                wave = (0.1 * rng.standard_normal(int(dur * SAMPLE_RATE))).astype(np.float32)
                _add(tar, f"{cid}.flac", b"not a flac file" if n - 1 in corrupt else encode_flac(wave))
                meta = {"id": cid, "text": f"clip {cid}", "duration": dur, "source": name, "orig_id": cid}
                _add(tar, f"{cid}.json", json.dumps(meta).encode())
        if tar is not None:
            tar.close()
        shards.append({"file": file, "clips": size, "seconds": float(sum(durs)), "ids": ids, "durations": durs})
    manifest = {
        "splits": {split: {"shards": shards, "clips": n, "hours": sum(x["seconds"] for x in shards) / 3600}},
        "drops": {},
    }
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def all_ids(path: Path, split: str = "train") -> list[str]:
    m = json.loads((Path(path) / "manifest.json").read_text())
    return [i for sh in m["splits"][split]["shards"] for i in sh["ids"]]


def ids_collate(samples: list[dict]) -> dict:
    """A light collator for reader tests (module level, so it pickles into workers): the reader,
    not feature extraction, is under test here; tests/data/test_data_collate.py covers the real one."""
    return {
        "ids": [s["id"] for s in samples],
        "weight": [float(s["weight"]) for s in samples],
        "num_samples": [len(s["audio"]) for s in samples],
        "text": [s["text"] for s in samples],
    }


def language_shards(root, rows):
    """Shards of tones labelled with language and text: rows of (text, language, seconds), one clip each,
    through a manifest source with a `language_column` (issue 38's per-row language)."""
    import soundfile as sf

    from speechlm.shard import NormalizeConfig, OutputConfig, ShardRecipe, Source, build

    lines = []
    for i, (said, lang, seconds) in enumerate(rows):
        t = np.arange(int(16000 * seconds)) / 16000
        sf.write(root / f"{i}.wav", (0.2 * np.sin(2 * np.pi * (200 + 30 * i) * t)).astype(np.float32), 16000)
        lines.append(json.dumps({"audio": f"{i}.wav", "text": said, "locale": lang}, ensure_ascii=False) + "\n")
    (root / "train.jsonl").write_text("".join(lines))
    src = Source(
        name="ml", kind="manifest", path=str(root), splits={"train": ["train.jsonl"]}, language_column="locale"
    )
    recipe = ShardRecipe(name="ml", sources=[src], normalize=NormalizeConfig(truecase=False), output=OutputConfig())
    return build(recipe, root / "out", workers=1)
