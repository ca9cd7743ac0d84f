"""One-off: speechlm/assets/truecaser_en.model.gz from the `truecase` package's English distribution.

The `truecase` wheel (PyPI, 0.0.14, Apache-2.0 licence file) ships `truecase/data/english.dist`, a
pickle of NLTK FreqDists counted on NLTK's Brown, Reuters, SemCor, CoNLL-2000 and State of the
Union corpora. speechlm never unpickles at run time: this script, run once by a maintainer on the
trusted wheel, turns its unigram casing counts into the plain-text MosesTruecaser model format
("token (count/total) Alt (count) ..."), which sacremoses loads.

Its unigram counts include sentence-initial words (capitalized by position, not by nature), which
would make e.g. "However" beat "however". Moses' own trainer skips them; here they are taken back
out with the backward bigram counts: a word that follows a sentence-final token (the pickle's
bigram for a sentence's first word pairs it with that sentence's last token, by Python's
negative indexing) was a sentence start.

Usage (the pickle is only read with a restricted unpickler that maps FreqDist to Counter):
    pip download --no-deps truecase==0.0.14 -d /tmp/tc && unzip -o -q /tmp/tc/truecase-*.whl -d /tmp/tc
    python tools/truecase_asset.py /tmp/tc/truecase/data/english.dist speechlm/assets/truecaser_en.model.gz
"""

from __future__ import annotations

import gzip
import pickle
import sys
from collections import Counter, defaultdict

SENT_FINAL = {".", "?", "!", "''", '"', ")", ";", ":", "'", "--"}
MIN_COUNT = 2  # a casing seen once is noise as often as not; it also halves the file


class _Restricted(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) == ("nltk.probability", "FreqDist"):
            return Counter
        if module == "builtins" and name in ("set", "dict", "frozenset"):
            return getattr(__import__("builtins"), name)
        raise pickle.UnpicklingError(f"refusing {module}.{name}")


def convert(dist_path: str, out_path: str) -> None:
    with open(dist_path, "rb") as f:
        d = _Restricted(f).load()
    uni, back = d["uni_dist"], d["backward_bi_dist"]
    starts = Counter()
    for key, n in back.items():
        prev, _, word = key.rpartition("_")
        if prev in SENT_FINAL:
            starts[word] += n
    casing: dict = defaultdict(Counter)
    for word, n in uni.items():
        if not any(c.isalpha() for c in word) or any(c.isspace() for c in word):
            continue
        n -= min(starts.get(word, 0), n)
        if n >= MIN_COUNT:
            casing[word.lower()][word] = n
    lines = []
    for low in sorted(casing):
        forms = casing[low].most_common()
        total = sum(casing[low].values())
        lines.append(" ".join([f"{forms[0][0]} ({forms[0][1]}/{total})"] + [f"{w} ({n})" for w, n in forms[1:]]))
    with gzip.GzipFile(out_path, "wb", mtime=0) as f:  # mtime 0: the same input gives the same bytes
        f.write(("\n".join(lines) + "\n").encode("utf-8"))
    print(f"{out_path}: {len(lines)} words")


if __name__ == "__main__":
    convert(sys.argv[1], sys.argv[2])
