"""Re-casing of all-lowercase / all-uppercase sources with sacremoses' MosesTruecaser.

Three models, in this order of precedence: a file named in the recipe (normalize.truecase_model),
one trained on the Moses-tokenized cased labels of the recipe's other sources, or, when the recipe
has no cased text at all, the English model speechlm ships (speechlm/assets/truecaser_en.model.gz,
see BUILTIN_ABOUT). Whichever it is, a copy is saved beside the shards so the build is
self-describing. Moses leaves a sentence-initial word as it is, and we feed it lowercased text, so
the first letter of each sentence is capitalized here.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
from pathlib import Path

from sacremoses import MosesDetokenizer, MosesTokenizer, MosesTruecaser

from speechlm.config import ConfigError

BUILTIN = Path(__file__).resolve().parent.parent / "assets" / "truecaser_en.model.gz"
BUILTIN_NAME = "builtin:truecaser_en"
BUILTIN_ABOUT = (
    "unigram casing counts of the `truecase` package 0.0.14 (Apache-2.0) English "
    "distribution, counted on NLTK's Brown, Reuters, SemCor, CoNLL-2000 and State of the "
    "Union corpora; converted to the Moses format by tools/truecase_asset.py"
)
SENT_END = {".", "?", "!"}

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


def load(model_file: str | Path, save_to: Path, key: str = "normalize.truecase_model") -> MosesTruecaser:
    """Use a given model file; a copy goes beside the shards so the build is self-describing."""
    src = Path(model_file).expanduser()
    if not src.is_file():
        raise ConfigError(f"{key}: file not found: {model_file}")
    save_to.parent.mkdir(parents=True, exist_ok=True)
    if src.resolve() != save_to.resolve():
        shutil.copyfile(src, save_to)
    return MosesTruecaser(str(save_to))


def builtin(save_to: Path) -> MosesTruecaser:
    """The shipped English model, unpacked beside the shards (plain text, never executed)."""
    save_to.parent.mkdir(parents=True, exist_ok=True)
    tmp = save_to.with_name(save_to.name + ".tmp")
    with gzip.open(BUILTIN, "rb") as f, open(tmp, "wb") as out:
        shutil.copyfileobj(f, out)
    tmp.replace(save_to)
    return MosesTruecaser(str(save_to))


def apply(tc: MosesTruecaser, text: str) -> str:
    out = tc.truecase(" ".join(_tokens(text.lower())), return_str=False)
    start = True
    for i, tok in enumerate(out):
        if start and tok[:1].isalpha():
            out[i] = tok[:1].upper() + tok[1:]
        if tok in SENT_END:
            start = True
        elif any(c.isalnum() for c in tok):
            start = False
    return _detok.detokenize(out)


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
