"""The listening corpus: speech a language model cannot predict, so a model must hear it.

Training clips are random orders of a vocabulary (the 52 grammar words of speechlm.demo.grammar
plus `vocabulary` words drawn from faker's English word list) and sentences of the grammar's 15
shapes. The test split comes in three speech parts, named in the clip ids:

- `seen`: sentences of shapes the training grammar never makes (TEST_TEMPLATES), training words only;
- `unseen`: sentences that each hold a word never heard in training (speechlm.demo.grammar.HELD_OUT);
- `random`: new random orders of training words, where the language model's prior is no help.

The eval split has the same parts (fewer clips). Non-speech clips (silence, noise, tones, clicks)
with empty labels are speechlm.demo.nonspeech, a source of their own so that `keep_empty` is set
for them alone. Everything is a function of the seed; no test or eval text occurs in train.

Word source: faker (MIT licence), `faker.providers.lorem.en_US.Provider.word_list`, 971 common
English words, read from the installed package at build time (nothing is copied into this repo).
"""

from __future__ import annotations

import random

from speechlm.config import ConfigError
from speechlm.demo import grammar

WORD_SOURCE = "faker.providers.lorem.en_US.Provider.word_list (faker, MIT licence)"
# espeak-ng speaks each group the same (checked with `espeak-ng -x` over the whole list): a random
# order gives no context to tell them apart, so only the first of each group is drawn, and none
# whose group holds a grammar word ("see", "to")
HOMOPHONE_GROUPS = [
    ("buy", "by"),
    ("cell", "sell"),
    ("eye", "I"),
    ("hear", "here"),
    ("hour", "our"),
    ("know", "no"),
    ("peace", "piece"),
    ("right", "write"),
    ("sea", "see"),
    ("their", "there"),
    ("to", "too", "two"),
    ("wait", "weight"),
    ("wear", "where"),
    ("for", "four"),
]
HOMOPHONES = {w for g in HOMOPHONE_GROUPS for w in g[1:]}
PARTS = ("seen", "unseen", "random")
MIN_WORDS, MAX_WORDS = 2, 8  # words per random sequence
# sentence shapes that never occur in training, over the grammar's words only: part "seen"
# measures listening, not template recall
TEST_TEMPLATES = [
    "Is the {n} in {P}?",
    "{N} is in {P} {t}.",
    "The {n} and the {o} went to {P}.",
    "Is the {a} {n} near the {o}?",
    "{P} is {a}.",
    "{N} {v} a {a} {n} and a {o}.",
    "Is the {n} near {N}?",
    "{T} {N} {v} {M} in {P}.",
    "Did the {a} {n} see {N}?",
    "{N}, {M} and {K} went to {P}.",
]


def word_list() -> list[str]:
    try:
        from faker.providers.lorem.en_US import Provider
    except ImportError as e:  # a dependency of speechlm; a broken install names it
        raise ConfigError(f"synthetic.vocabulary: the listening corpus needs the faker package ({e})") from None
    return list(Provider.word_list)


def vocabulary(extra: int, seed: int) -> list[str]:
    """The training vocabulary: the grammar's words plus `extra` words drawn (seeded) from the word
    list, leaving out homophones and the held-out words of the unseen part."""
    known = set(grammar.VOCABULARY)
    lower = {w.lower() for w in known | grammar.HELD_OUT_WORDS}
    pool = [w for w in word_list() if w not in HOMOPHONES and w.lower() not in lower]
    clash = {w for g in HOMOPHONE_GROUPS if known & set(g) for w in g} - known  # "sea" beside "see"
    if not 0 <= extra <= len(pool) - len(clash):
        raise ConfigError(
            f"synthetic.vocabulary: must be between 0 and {len(pool) - len(clash)} (the word list's "
            f"usable words), got {extra}"
        )
    rng = random.Random(f"{seed}-vocabulary")
    drawn = [w for w in rng.sample(pool, extra) if w not in clash]
    drawn += rng.sample([w for w in pool if w not in clash and w not in drawn], extra - len(drawn))
    return sorted(known) + sorted(drawn)


def random_sequence(rng: random.Random, words: list[str]) -> str:
    return " ".join(rng.choice(words) for _ in range(rng.randint(MIN_WORDS, MAX_WORDS)))


def _test_sentence(rng: random.Random) -> str:
    pools = {
        "N": grammar.NAMES,
        "P": grammar.PLACES,
        "n": grammar.NOUNS,
        "a": grammar.ADJECTIVES,
        "v": grammar.VERBS,
    }
    n, m, k = rng.sample(pools["N"], 3)
    noun, other = rng.sample(pools["n"], 2)
    t = rng.choice(grammar.TIMES)
    return rng.choice(TEST_TEMPLATES).format(
        N=n,
        M=m,
        K=k,
        P=rng.choice(pools["P"]),
        n=noun,
        o=other,
        a=rng.choice(pools["a"]),
        v=rng.choice(pools["v"]),
        t=t,
        T=t.capitalize() + ",",
    )


def _distinct(make, need: int, taken: set[str], what: str) -> list[str]:
    out: dict[str, None] = {}
    for _ in range(50 * need + 1000):
        if len(out) == need:
            return list(out)
        s = make()
        if s not in taken:
            out.setdefault(s)
    raise ConfigError(f"synthetic: cannot make {need} distinct {what} (raise synthetic.vocabulary or lower the counts)")


def texts(cfg) -> dict[str, list[tuple[str, str]]]:
    """split -> [(part, text)]: train holds `random_share` random sequences, the rest grammar
    sentences; eval and test hold the three parts (unseen_test and random_test clips of theirs,
    the rest `seen`), scaled down for eval. No eval or test text occurs in train."""
    words = vocabulary(cfg.vocabulary, cfg.seed)
    rng = random.Random(f"{cfg.seed}-listen")
    out: dict[str, list[tuple[str, str]]] = {}
    taken: set[str] = set()
    # held-out texts first, so that train is drawn around them
    for split in ("test", "eval"):
        n = getattr(cfg, split)
        scale = n / max(1, cfg.test)
        n_random = round(cfg.random_test * scale)
        n_unseen = round(cfg.unseen_test * scale)
        n_seen = max(0, n - n_random - n_unseen)
        rows = [("seen", s) for s in _distinct(lambda: _test_sentence(rng), n_seen, taken, "test-shape sentences")]
        rows += [
            ("unseen", s)
            for s in grammar.sentences({"test": n_unseen}, f"{cfg.seed}-{split}", n_unseen)["test"]
            if s not in taken
        ]
        rows += [
            ("random", s) for s in _distinct(lambda: random_sequence(rng, words), n_random, taken, "random sequences")
        ]
        taken.update(s for _, s in rows)
        out[split] = rows
    n_random = round(cfg.train * cfg.random_share)
    seqs = _distinct(lambda: random_sequence(rng, words), n_random, taken, "random sequences")
    taken.update(seqs)
    said = _distinct(lambda: grammar._sentence(rng), cfg.train - n_random, taken, "grammar sentences")
    mixed = [("train", s) for s in seqs + said]
    rng.shuffle(mixed)
    out["train"] = mixed
    return out


def rows(cfg, split: str) -> list[tuple[str, str, tuple]]:
    """(orig_id, text, audio spec) for one split, ids naming the part ("test-random-00007")."""
    vrng = random.Random(f"{cfg.seed}-{split}-voices")
    out = []
    for i, (part, text) in enumerate(texts(cfg)[split]):
        name = split if split == "train" else f"{split}-{part}"
        out.append(
            (
                f"{name}-{i:05d}",
                text,
                (text, vrng.choice(cfg.voices), vrng.choice(cfg.speeds), vrng.choice(cfg.pitches)),
            )
        )
    return out
