"""Re-casing of all-lowercase / all-uppercase sources with sacremoses' MosesTruecaser.

The model is trained on the Moses-tokenized cased labels of the recipe's other sources (or read
from a file named in the recipe) and saved beside the shards. Moses leaves a sentence-initial word
as it is, and we feed it lowercased text, so the first letter is capitalized here.
"""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from sacremoses import MosesDetokenizer, MosesTokenizer, MosesTruecaser

_tok = MosesTokenizer(lang="en")
_detok = MosesDetokenizer(lang="en")


def _tokens(text: str) -> list[str]:
    return _tok.tokenize(text, escape=False)


def train(labels: list[str], save_to: Path) -> MosesTruecaser:
    save_to.parent.mkdir(parents=True, exist_ok=True)
    tmp = save_to.with_name(save_to.name + ".tmp")
    tc = MosesTruecaser()
    tc.train([_tokens(t) for t in labels], save_to=str(tmp))
    tmp.replace(save_to)
    return MosesTruecaser(str(save_to))


def load(model_file: str | Path, save_to: Path) -> MosesTruecaser:
    """Use a given model file; a copy goes beside the shards so the build is self-describing."""
    src = Path(model_file).expanduser()
    if not src.is_file():
        from speechlm.config import ConfigError

        raise ConfigError(f"normalize.truecase_model: file not found: {model_file}")
    save_to.parent.mkdir(parents=True, exist_ok=True)
    if src.resolve() != save_to.resolve():
        shutil.copyfile(src, save_to)
    return MosesTruecaser(str(save_to))


def apply(tc: MosesTruecaser, text: str) -> str:
    out = tc.truecase(" ".join(_tokens(text.lower())), return_str=False)
    text = _detok.detokenize(out)
    return text[:1].upper() + text[1:]


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
