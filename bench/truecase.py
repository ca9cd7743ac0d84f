"""Word-level case accuracy of speechlm's re-casing: held-out cased English, upper-cased, re-cased.

Text: the Debian `fortunes` package's quotations (apt-get install fortunes; /usr/share/games/fortunes),
cased English with names, "I", acronyms and sentence starts, and none of it in the corpora the built-in
model was counted on. Sentences are split, filtered to mostly-lowercase ones of 4-40 words
with no two all-caps words in a row (headings and shouting, not acronyms), de-duplicated and shuffled
(seeded); 20% are held out. Compared:
  builtin  the English model speechlm ships (speechlm/assets/truecaser_en.model.gz)
  recipe   a MosesTruecaser trained, as a recipe with cased sources trains one, on the other 80%
  baseline lowercase with a capital first letter (what re-casing must beat)
A word is a run of letters (apostrophes inside kept); a word is right when its case is exactly the
reference's. Categories: sentence start (a sentence's first word), "I" (I, I'm, I've ...), acronym
(2+ letters, all uppercase), proper name (capitalized, not all-caps, not "I", not first in the
sentence nor right after : ; " ( or a dash, where quotes and titles restart capitals, and not one of
Moses' always-lowercase function words: "The", "And" there are title or quote starts, not names).

    python bench/truecase.py [--dir /usr/share/games/fortunes] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without an install

from sacremoses import MosesDetruecaser  # noqa: E402

from speechlm.shard import truecase  # noqa: E402

WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*")
SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[\"'(]?[A-Z])")
CATEGORIES = ("overall", "proper name", "sentence start", "I", "acronym")
FUNCTION_WORDS = {w for w in MosesDetruecaser().ALWAYS_LOWER if w.isalpha()}
RESTART = re.compile(r"[:;\"(]|--|\s-\s")  # after these a capital may be a restart, not a name


def sentences(folder: Path) -> list[str]:
    out = []
    for f in sorted(folder.iterdir()):
        if f.suffix or f.is_symlink() or not f.is_file() or "art" in f.name:
            continue  # .dat indexes, .u8 links, ASCII art
        for cookie in f.read_text(encoding="utf-8", errors="replace").split("\n%\n"):
            text = " ".join(cookie.split())
            text = re.sub(r"^--\s*|\s--\s*", " ", text).strip()  # attribution dashes
            for s in SENT_SPLIT.split(text):
                words = WORD.findall(s)
                shouted = any(a.isupper() and b.isupper() for a, b in zip(words, words[1:]))
                if 4 <= len(s.split()) <= 40 and sum(w.islower() for w in words) > len(words) / 2 and not shouted:
                    out.append(s)
    return sorted(set(out))


def category(word: str, first: bool, restart: bool = False) -> list[str]:
    cats = ["overall"]
    if first:
        cats.append("sentence start")
    if word.lower() == "i" or word.lower().startswith("i'"):
        cats.append("I")
    elif len(word) >= 2 and word.isupper():
        cats.append("acronym")
    elif not (first or restart) and word[0].isupper() and word.lower() not in FUNCTION_WORDS:
        cats.append("proper name")
    return cats


def score(recase, test: list[str]) -> tuple[dict, int]:
    right = {c: 0 for c in CATEGORIES}
    total = {c: 0 for c in CATEGORIES}
    unaligned = 0
    for ref in test:
        spans = list(WORD.finditer(ref))
        want, got = [m.group() for m in spans], WORD.findall(recase(ref.upper()))
        if [w.lower() for w in want] != [w.lower() for w in got]:
            unaligned += 1  # tokenization changed the words: not scored
            continue
        for i, (w, g) in enumerate(zip(want, got)):
            restart = i > 0 and bool(RESTART.search(ref[spans[i - 1].end() : spans[i].start()]))
            for c in category(w, i == 0, restart):
                total[c] += 1
                right[c] += w == g
    return {c: (right[c] / total[c] if total[c] else float("nan"), total[c]) for c in CATEGORIES}, unaligned


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=Path("/usr/share/games/fortunes"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not args.dir.is_dir():
        sys.exit(f"{args.dir}: not found (apt-get install fortunes)")
    sents = sentences(args.dir)
    random.Random(args.seed).shuffle(sents)
    n_test = len(sents) // 5
    test, train = sents[:n_test], sents[n_test:]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        models = {
            "builtin": truecase.builtin(Path(tmp) / "builtin.model"),
            "recipe": truecase.train(train, Path(tmp) / "recipe.model"),
        }
        load_s = time.perf_counter() - t0
        recasers = {name: (lambda text, tc=tc: truecase.apply(tc, text)) for name, tc in models.items()}
        recasers["baseline"] = lambda text: text.lower().capitalize()
        print(
            f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
            f"{len(train)} train / {len(test)} held-out sentences from {args.dir}; models ready in {load_s:.1f} s"
        )
        print("| model | " + " | ".join(CATEGORIES) + " | unaligned |")
        print("|---" * (len(CATEGORIES) + 2) + "|")
        for name, fn in recasers.items():
            t0 = time.perf_counter()
            res, unaligned = score(fn, test)
            dt = time.perf_counter() - t0
            cells = [f"{100 * acc:.1f}% ({n})" for acc, n in res.values()]
            print(f"| {name} | " + " | ".join(cells) + f" | {unaligned} |  ({len(test) / dt:.0f} sentences/s)")


if __name__ == "__main__":
    main()
