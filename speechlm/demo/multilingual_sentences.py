"""The multilingual corpus's parallel sentences (speechlm.demo.multilingual makes the clips from them).

One draw of names, nouns, adjectives, verbs, places and times (`draw`) renders a sentence shape in
every language at once (`slots`, `sentence`), with articles, gender, case and adjective endings agreeing
(`noun_phrase`, `predicate`), so each sentence has its English translation. TRAIN shapes make the
training and `unseen` sentences, TEST shapes the `seen` and `translate` ones.
"""

from __future__ import annotations

import random

from speechlm.demo import lexicon as L

LANG_INDEX = {"es": 0, "de": 1, "fr": 2, "ja": 3}
_ES_ART = {"m": "el", "f": "la"}
_FR_ART = {"m": "le", "f": "la"}
_DE_ART = {"nom": {"m": "der", "f": "die", "n": "das"}, "acc": {"m": "den", "f": "die", "n": "das"}}


def _of(table_value, lang: str, en: str) -> str:
    return en if lang == "en" else table_value[LANG_INDEX[lang]]


def noun_phrase(lang: str, n: L.Noun, case: str, adj: L.Adjective | None = None) -> str:
    """The noun with its definite article (and an attributive adjective), agreeing in gender and case."""
    if lang == "en":
        return f"the {adj.en} {n.en}" if adj else f"the {n.en}"
    if lang == "ja":
        return f"{adj.ja}{n.ja}" if adj else n.ja
    if lang == "es":
        a = f" {adj.es[n.es_g == 'f']}" if adj else ""
        return f"{_ES_ART[n.es_g]} {n.es}{a}"
    if lang == "fr":
        if adj is None:
            return f"{_FR_ART[n.fr_g]} {n.fr}"
        a = adj.fr[n.fr_g == "f"]
        return f"{_FR_ART[n.fr_g]} {a} {n.fr}" if adj.fr_before else f"{_FR_ART[n.fr_g]} {n.fr} {a}"
    art = _DE_ART[case][n.de_g]
    if adj is None:
        return f"{art} {n.de}"
    # weak declension after the definite article: -en for the masculine accusative, else -e
    ending = "en" if case == "acc" and n.de_g == "m" else "e"
    return f"{art} {adj.de}{ending} {n.de}"


def predicate(lang: str, n: L.Noun, adj: L.Adjective) -> str:
    """The adjective after "is", agreeing with the noun where the language wants it."""
    return {
        "en": adj.en,
        "es": adj.es[n.es_g == "f"],
        "de": adj.de,
        "fr": adj.fr[n.fr_g == "f"],
        "ja": adj.ja,
    }[lang]


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def slots(lang: str, d: dict) -> dict[str, str]:
    """A draw (names, place, noun, adjective, verb, time) rendered as one language's pieces."""
    n, a = d["noun"], d["adj"]
    name = (lambda x: d["names"][x]) if lang == "ja" else (lambda x: x)
    out = {
        "N": name(d["N"]),
        "M": name(d["M"]),
        "P": _of(d["place"], lang, d["P"]),
        "v": _of(d["verb"], lang, d["V"]),
        "t": _of(d["time"], lang, d["T"]),
        "n": noun_phrase(lang, n, "nom"),
        "o": noun_phrase(lang, n, "acc"),
        "an": noun_phrase(lang, n, "nom", a),
        "ao": noun_phrase(lang, n, "acc", a),
        "a": predicate(lang, n, a),
        "exist": "います" if n.ja_alive else "あります",
    }
    out.update({k.upper() + "_": _cap(out[k]) for k in ("n", "an", "t")})
    return out


# Sentence shapes, one format string per language over slots(); TRAIN makes the training and
# `unseen` sentences, TEST the `seen` and `translate` ones (shapes training never makes).
TRAIN = [
    {"en": "{N} {v} {o}.", "es": "{N} {v} {o}.", "de": "{N} {v} {o}.", "fr": "{N} {v} {o}.", "ja": "{N}が{o}を{v}。"},
    {"en": "{N_} is {a}.", "es": "{N_} es {a}.", "de": "{N_} ist {a}.", "fr": "{N_} est {a}.", "ja": "{n}が{a}です。"},
    {
        "en": "{N} visited {P}.",
        "es": "{N} visitó {P}.",
        "de": "{N} besuchte {P}.",
        "fr": "{N} a visité {P}.",
        "ja": "{N}が{P}にいきました。",
    },
    {
        "en": "{T_}, {N} {v} {o}.",
        "es": "{T_}, {N} {v} {o}.",
        "de": "{T_} {v} {N} {o}.",
        "fr": "{T_}, {N} {v} {o}.",
        "ja": "{t}、{N}が{o}を{v}。",
    },
    {
        "en": "{N_} is in {P}.",
        "es": "{N_} está en {P}.",
        "de": "{N_} ist in {P}.",
        "fr": "{N_} est à {P}.",
        "ja": "{n}が{P}に{exist}。",
    },
    {
        "en": "Did {N} see {o}?",
        "es": "¿{N} vio {o}?",
        "de": "Sah {N} {o}?",
        "fr": "{N} a vu {o}?",
        "ja": "{N}が{o}をみましたか。",
    },
    {
        "en": "{N} and {M} visited {P} {t}.",
        "es": "{N} y {M} visitaron {P} {t}.",
        "de": "{N} und {M} besuchten {P} {t}.",
        "fr": "{N} et {M} ont visité {P} {t}.",
        "ja": "{N}と{M}が{t}{P}にいきました。",
    },
    {
        "en": "{N} {v} {ao}.",
        "es": "{N} {v} {ao}.",
        "de": "{N} {v} {ao}.",
        "fr": "{N} {v} {ao}.",
        "ja": "{N}が{ao}を{v}。",
    },
]
TEST = [
    {"en": "Is {n} {a}?", "es": "¿Es {n} {a}?", "de": "Ist {n} {a}?", "fr": "{N_} est {a}?", "ja": "{n}が{a}ですか。"},
    {
        "en": "{AN_} is in {P}.",
        "es": "{AN_} está en {P}.",
        "de": "{AN_} ist in {P}.",
        "fr": "{AN_} est à {P}.",
        "ja": "{an}が{P}に{exist}。",
    },
    {
        "en": "{T_}, {N} visited {P}.",
        "es": "{T_}, {N} visitó {P}.",
        "de": "{T_} besuchte {N} {P}.",
        "fr": "{T_}, {N} a visité {P}.",
        "ja": "{t}、{N}が{P}にいきました。",
    },
    {
        "en": "Did {N} see {ao}?",
        "es": "¿{N} vio {ao}?",
        "de": "Sah {N} {ao}?",
        "fr": "{N} a vu {ao}?",
        "ja": "{N}が{ao}をみましたか。",
    },
    {
        "en": "{N} and {M} visited {P}.",
        "es": "{N} y {M} visitaron {P}.",
        "de": "{N} und {M} besuchten {P}.",
        "fr": "{N} et {M} ont visité {P}.",
        "ja": "{N}と{M}が{P}にいきました。",
    },
]


def _pools(held_out: bool) -> dict:
    names = dict(L.NAMES, **(L.HELD_OUT_BY_LANGUAGE["names"] if held_out else {}))
    return {
        "names": names,
        "places": dict(L.PLACES_BY_LANGUAGE, **(L.HELD_OUT_BY_LANGUAGE["places"] if held_out else {})),
        "nouns": L.NOUNS_BY_LANGUAGE + (L.HELD_OUT_BY_LANGUAGE["nouns"] if held_out else []),
        "adjectives": L.ADJECTIVES_BY_LANGUAGE + (L.HELD_OUT_BY_LANGUAGE["adjectives"] if held_out else []),
        "verbs": dict(L.VERBS_BY_LANGUAGE, **(L.HELD_OUT_BY_LANGUAGE["verbs"] if held_out else {})),
    }


def draw(rng: random.Random, held_out: bool = False) -> dict:
    """One draw of every slot; with held_out the pools also hold the held-out entries."""
    p = _pools(held_out)
    n, m = rng.sample(sorted(p["names"]), 2)
    place, verb, time = (
        rng.choice(sorted(p["places"])),
        rng.choice(sorted(p["verbs"])),
        rng.choice(sorted(L.TIMES_BY_LANGUAGE)),
    )
    return {
        "names": p["names"],
        "N": n,
        "M": m,
        "P": place,
        "place": p["places"][place],
        "V": verb,
        "verb": p["verbs"][verb],
        "T": time,
        "time": L.TIMES_BY_LANGUAGE[time],
        "noun": rng.choice(p["nouns"]),
        "adj": rng.choice(p["adjectives"]),
    }


def sentence(rng: random.Random, lang: str, shapes: list[dict], held_out: bool = False) -> tuple[str, str, bool]:
    """(sentence in `lang`, its English, whether it holds a held-out word: a drawn held-out entry
    counts only where the shape uses its slot, so the flag reads the rendered English)."""
    d = draw(rng, held_out)
    shape = rng.choice(shapes)
    text = shape[lang].format(**slots(lang, d))
    english = shape["en"].format(**slots("en", d))
    return text, english, held_out and _holds_held_out(english)


def _holds_held_out(english: str) -> bool:
    ho = L.HELD_OUT_BY_LANGUAGE
    words = {w.strip(",.?") for w in english.split()}
    held = set(ho["names"]) | set(ho["places"]) | set(ho["verbs"])
    held |= {n.en for n in ho["nouns"]} | {a.en for a in ho["adjectives"]}
    return bool(words & held)


def training_words(lang: str) -> list[str]:
    """The words random orders are made of: the lexicon's training entries in `lang` (multi-word
    forms split; Japanese entries whole), no held-out word."""
    forms = (
        [L.NAMES[n] if lang == "ja" else n for n in L.NAMES]
        + [_of(v, lang, k) for k, v in L.PLACES_BY_LANGUAGE.items()]
        + [_of(v, lang, k) for k, v in L.VERBS_BY_LANGUAGE.items()]
        + [_of(v, lang, k) for k, v in L.TIMES_BY_LANGUAGE.items()]
        + [getattr(n, lang) for n in L.NOUNS_BY_LANGUAGE]
        + [predicate(lang, L.NOUNS_BY_LANGUAGE[0], a) for a in L.ADJECTIVES_BY_LANGUAGE]
    )
    return sorted({w for f in forms for w in (f.split() if lang != "ja" else [f])})
