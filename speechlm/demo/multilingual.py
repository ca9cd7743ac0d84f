"""The multilingual listening corpus: the same sentences in en, es, de, fr and ja, spoken by espeak-ng.

One source per language (kind `multilingual`, shards/multilingual_demo.yaml). Sentences come from
parallel templates over the lexicon (speechlm.demo.multilingual_sentences): one draw of names, nouns, adjectives,
verbs, places and times renders the sentence in every language at once, so each sentence has its
English translation. The parts are those of the English demo (speechlm.demo.corpus):

- train: grammar sentences (TRAIN shapes) and random orders of the language's training words;
- `seen`: sentences of shapes training never makes (TEST shapes), training words only;
- `unseen`: training shapes, each sentence holding a held-out word (lexicon.HELD_OUT_BY_LANGUAGE);
- `random`: new random orders of training words, where the language model's prior is no help;
- `translate` (not for en): held-out TEST-shape sentences whose task is translation into English.

Every clip's JSON carries `language` (ISO 639-1), `task` ("transcribe" or "translate") and
`target_text` (the answer of the task: the transcript, or the English translation); `text` is always
the transcript. Japanese sentences are written without spaces, in kana; random orders are word lists
with spaces in every language (espeak-ng spells a long unspaced kana string mora by mora, and
reads ィ and ー in it as "Japanese letter" in English).
Everything is a function of the seed and the language; no eval or test text occurs in train.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from dataclasses import dataclass, field

from speechlm.config import ConfigError
from speechlm.demo import lexicon as L
from speechlm.demo.multilingual_sentences import TEST, TRAIN, sentence, training_words

PARTS = ("seen", "unseen", "random", "translate")
MIN_WORDS, MAX_WORDS = 2, 8  # words per random sequence
VOICES = {  # espeak-ng voices (+ variants: another speaker of the same language)
    "en": ["en-us", "en-us+f3", "en-gb+m3"],
    "es": ["es", "es+f3", "es-419+m3"],
    "de": ["de", "de+f3", "de+m3"],
    "fr": ["fr-fr", "fr-fr+f3", "fr-be+m3"],
    "ja": ["ja", "ja+f3", "ja+m3"],
}


@dataclass
class MultilingualConfig:
    """One language of the multilingual corpus: split sizes, held-out parts, voices and seed."""

    language: str = "es"  # one of lexicon.LANGUAGES
    train: int = 600
    eval: int = 20
    test: int = 60
    # test clips per held-out part (eval gets the same shares, scaled); the rest of test is `seen`
    unseen_test: int = 15
    random_test: int = 15
    translate_test: int = 15  # must be 0 for en: English is the translation's target
    random_share: float = 0.5  # share of training clips that are random word orders
    # share of training sentences whose task is translation (their target_text is the English)
    translate_share: float = 0.0
    voices: list[str] = field(default_factory=list)  # empty: VOICES[language]
    speeds: list[int] = field(default_factory=lambda: [140, 160, 180])
    pitches: list[int] = field(default_factory=lambda: [35, 50, 65])
    silence_seconds: float = 0.3  # up to this much silence before and after each clip
    seed: int = 0


def validate(cfg: MultilingualConfig, key: str) -> None:
    if cfg.language not in L.LANGUAGES:
        raise ConfigError(f"{key}.language: one of {', '.join(L.LANGUAGES)}, got {cfg.language!r}")
    for name in ("train", "eval", "test", "unseen_test", "random_test", "translate_test"):
        if getattr(cfg, name) < 0:
            raise ConfigError(f"{key}.{name}: must be at least 0, got {getattr(cfg, name)}")
    held = cfg.unseen_test + cfg.random_test + cfg.translate_test
    if held > cfg.test:
        raise ConfigError(f"{key}.test: must hold unseen_test + random_test + translate_test ({held}), got {cfg.test}")
    if cfg.language == "en" and (cfg.translate_test or cfg.translate_share):
        raise ConfigError(
            f"{key}.translate_test: English clips translate into English; set it and translate_share to 0"
        )
    for name in ("random_share", "translate_share"):
        if not 0 <= getattr(cfg, name) <= 1:
            raise ConfigError(f"{key}.{name}: must be between 0 and 1, got {getattr(cfg, name)}")
    if not 0 <= cfg.silence_seconds <= 5:
        raise ConfigError(f"{key}.silence_seconds: must be between 0 and 5, got {cfg.silence_seconds}")


def random_sequence(rng: random.Random, words: list[str]) -> str:
    return " ".join(rng.choice(words) for _ in range(rng.randint(MIN_WORDS, MAX_WORDS)))


def check_voices(lang: str, voices: list[str], texts: list[str], key: str) -> None:
    """Each voice exists and reads every text in `lang`: espeak-ng marks words it reads with
    another language's rules by "(en)" in its phonemes (-x), as its cmn voice does for common
    hanzi. A ConfigError naming the key and the words, before any clip is made. The distinct words
    are checked (sentences in Japanese, which has no spaces), once per voice without its variant."""
    if shutil.which("espeak-ng") is None:
        raise ConfigError("the multilingual source needs espeak-ng: apt-get install espeak-ng")
    units = sorted(set(texts) if lang == "ja" else {w.strip("¿?.,") for t in texts for w in t.split()} - {""})
    for v in sorted({v.split("+")[0] for v in voices}):
        out = _phonemes(v, "\n".join(units))
        if out is None or not out.strip():
            raise ConfigError(f"{key}.voices: espeak-ng has no voice {v!r} (see espeak-ng --voices={lang})")
        if lang != "en" and "(en)" in out:
            bad = [u for u in units if "(en)" in (_phonemes(v, u) or "")][:5]
            raise ConfigError(f"{key}.voices: espeak-ng voice {v!r} reads {bad} as English")


def _phonemes(voice: str, text: str) -> str | None:
    proc = subprocess.run(["espeak-ng", "-q", "-v", voice, "-x", text], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


# --------------------------------------------------------------------------- splits


def _distinct(make, need: int, taken: set[str], what: str) -> list:
    """`need` items from make() whose first element (the text) is new and not in `taken`."""
    out: dict[str, tuple] = {}
    for _ in range(50 * need + 1000):
        if len(out) == need:
            return list(out.values())
        item = make()
        if item[0] not in taken and item[0] not in out:
            out[item[0]] = item
    raise ConfigError(f"multilingual: cannot make {need} distinct {what} (lower the counts)")


def texts(cfg: MultilingualConfig) -> dict[str, list[tuple[str, str, str]]]:
    """split -> [(part, text, english)] for one language; english is "" for random orders (no
    translation). Held-out splits first, so train is drawn around them."""
    lang = cfg.language
    rng = random.Random(f"{cfg.seed}-{lang}-multilingual")
    words = training_words(lang)
    out: dict[str, list] = {}
    taken: set[str] = set()

    def unseen():
        while True:
            text, en, held = sentence(rng, lang, TRAIN, held_out=True)
            if held:
                return text, en

    for split in ("test", "eval"):
        scale = getattr(cfg, split) / max(1, cfg.test)
        counts = {p: round(getattr(cfg, f"{p}_test") * scale) for p in ("unseen", "random", "translate")}
        counts["seen"] = max(0, getattr(cfg, split) - sum(counts.values()))
        makers = {
            "seen": lambda: sentence(rng, lang, TEST)[:2],
            "unseen": unseen,
            "random": lambda: (random_sequence(rng, words), ""),
            "translate": lambda: sentence(rng, lang, TEST)[:2],
        }
        rows = []
        for part in PARTS:
            rows += [(part, t, e) for t, e in _distinct(makers[part], counts[part], taken, f"{part} texts")]
            taken.update(t for _, t, _ in rows)
        out[split] = rows
    n_random = round(cfg.train * cfg.random_share)
    seqs = _distinct(lambda: (random_sequence(rng, words), ""), n_random, taken, "random orders")
    taken.update(t for t, _ in seqs)
    said = _distinct(lambda: sentence(rng, lang, TRAIN)[:2], cfg.train - n_random, taken, "training sentences")
    n_translate = round(len(said) * cfg.translate_share)
    train = [("train", t, "") for t, _ in seqs]
    train += [("translate" if i < n_translate else "train", t, e) for i, (t, e) in enumerate(said)]
    rng.shuffle(train)
    out["train"] = train
    return out


def rows(cfg: MultilingualConfig, split: str) -> list[tuple[str, str, dict]]:
    """(orig_id, text, ref) for one split; ids name the part ("test-random-00007"); the ref holds
    the audio spec (speechlm.demo.builtin.synthesize) and the clip's labels (language, task,
    target_text)."""
    voices = cfg.voices or VOICES[cfg.language]
    vrng = random.Random(f"{cfg.seed}-{cfg.language}-{split}-voices")
    srng = random.Random(f"{cfg.seed}-{cfg.language}-{split}-silence")
    out = []
    for i, (part, text, english) in enumerate(texts(cfg)[split]):
        name = split if split == "train" else f"{split}-{part}"
        spec = (text, vrng.choice(voices), vrng.choice(cfg.speeds), vrng.choice(cfg.pitches))
        if cfg.silence_seconds > 0:
            pad = cfg.silence_seconds
            spec = ("silence", round(srng.uniform(0, pad), 3), round(srng.uniform(0, pad), 3), spec)
        task = "translate" if part == "translate" else "transcribe"
        labels = {"language": cfg.language, "task": task, "target_text": english if task == "translate" else text}
        out.append((f"{name}-{i:05d}", text, {"audio": spec, "labels": labels}))
    return out
