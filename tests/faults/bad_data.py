"""A shard set with every kind of bad input, made from a good one (real speech from the synthetic set).

Injected into the train split: an extra tar with six bad clips (corrupt FLAC bytes, zero samples,
NaN samples, inf samples, a non-UTF-8 label, an empty label), one good tar cut in the middle of a
member (truncated download), and one manifest entry whose tar does not exist (missing shard).
`BadSet.unreadable` lists every train id that can't be trained on, so a test can demand that all the
rest is trained on exactly once per epoch.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf

BAD = {  # clip id -> the fault
    "bad_corrupt": "corrupt flac",
    "bad_zero": "zero-length audio",
    "bad_nan": "NaN samples",
    "bad_inf": "inf samples",
    "bad_utf8": "non-UTF-8 text",
    "bad_empty": "empty text",
}


@dataclass
class BadSet:
    path: Path
    bad: list[str] = field(default_factory=list)  # ids in the bad tar
    truncated: list[str] = field(default_factory=list)  # ids lost to the cut tar
    missing: list[str] = field(default_factory=list)  # ids of the missing tar
    good: list[str] = field(default_factory=list)  # everything else in the train split

    @property
    def unreadable(self) -> set[str]:
        return set(self.bad) | set(self.truncated) | set(self.missing)


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _wav(wave: np.ndarray) -> bytes:
    # float WAV keeps NaN/inf (FLAC is 16-bit PCM and can't); the reader decodes any container
    buf = io.BytesIO()
    sf.write(buf, wave.astype(np.float32), 16000, format="WAV", subtype="FLOAT")
    return buf.getvalue()


def make_bad_set(good: Path, out: Path) -> BadSet:
    out.mkdir(parents=True, exist_ok=True)
    man = json.loads((good / "manifest.json").read_text())
    for sp in man["splits"].values():
        for s in sp["shards"]:
            shutil.copy(good / s["file"], out / s["file"])
    train = man["splits"]["train"]["shards"]
    with tarfile.open(out / train[0]["file"]) as t:
        flac = next(t.extractfile(m).read() for m in t.getmembers() if m.name.endswith(".flac"))
    wave, _ = sf.read(io.BytesIO(flac), dtype="float32")
    meta = lambda cid, text: json.dumps(  # noqa: E731
        {
            "id": cid,
            "text": text,
            "duration": len(wave) / 16000,  # noqa: E731
            "source": "bad",
            "orig_id": cid,
        }
    ).encode()
    bad_file = "synthetic-train-000099.tar"
    with tarfile.open(out / bad_file, "w") as t:
        for cid, flac_bytes, json_bytes in [
            ("bad_corrupt", b"fLaC but not really" * 10, meta("bad_corrupt", "Corrupt audio.")),
            ("bad_zero", _wav(np.zeros(0)), meta("bad_zero", "No samples.")),
            ("bad_nan", _wav(np.where(np.arange(len(wave)) % 7 == 0, np.nan, wave)), meta("bad_nan", "Not a number.")),
            ("bad_inf", _wav(np.where(np.arange(len(wave)) % 7 == 0, np.inf, wave)), meta("bad_inf", "Infinity.")),
            ("bad_utf8", flac, meta("bad_utf8", "PLACEHOLDER").replace(b"PLACEHOLDER", b"caf\xe9 \xff")),
            ("bad_empty", flac, meta("bad_empty", "")),
        ]:
            _add(t, f"{cid}.flac", flac_bytes)
            _add(t, f"{cid}.json", json_bytes)
    train.append(
        {
            **train[0],
            "file": bad_file,
            "clips": len(BAD),
            "seconds": len(BAD) * len(wave) / 16000,
            "ids": list(BAD),
            "durations": [len(wave) / 16000] * len(BAD),
        }
    )
    man["splits"]["train"]["clips"] += len(BAD)
    # a truncated tar: cut in the middle of the 3rd clip's audio; it and the rest of that tar are lost
    cut = train[1]
    with tarfile.open(out / cut["file"]) as t:
        members = t.getmembers()
    flacs = [m for m in members if m.name.endswith(".flac")]
    at = flacs[2].offset_data + flacs[2].size // 2
    data = (out / cut["file"]).read_bytes()
    (out / cut["file"]).write_bytes(data[:at])
    order = [m.name.rsplit(".", 1)[0] for m in flacs]
    truncated = order[2:]
    # a missing shard: listed in the manifest, not on disk
    missing = train[2]
    (out / missing["file"]).unlink()
    (out / "manifest.json").write_text(json.dumps(man))
    all_ids = [i for s in train for i in s["ids"]]
    gone = set(BAD) | set(truncated) | set(missing["ids"])
    return BadSet(out, list(BAD), truncated, list(missing["ids"]), [i for i in all_ids if i not in gone])
