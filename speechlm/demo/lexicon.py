"""The multilingual demo's parallel lexicon: each English word with its Spanish, German, French and
Japanese forms, written for this project (no word list copied from anywhere).

Every form was chosen so that espeak-ng 1.51 reads it in its own voice without an English fallback
(`espeak-ng -q -v <lang> -x` shows no "(en)"; docs/languages.md). Japanese is kana only (espeak-ng
reads kana, not kanji), and its sentences avoid the particle は (espeak-ng says "ha", not "wa").
Nouns carry their grammatical gender where the language has one (the article and the adjective
agree with it); French adjectives that go before the noun say so.

The held-out entries (HELD_OUT_BY_LANGUAGE) occur in no training or eval sentence: the test split's `unseen`
part is made of sentences holding one of them, as in the English demo (speechlm.demo.grammar).
"""

from __future__ import annotations

from dataclasses import dataclass

LANGUAGES = ("en", "es", "de", "fr", "ja")


@dataclass(frozen=True)
class Noun:
    en: str
    es: str  # with its gender: "m" or "f"
    es_g: str
    de: str
    de_g: str  # "m", "f" or "n"
    fr: str
    fr_g: str
    ja: str
    ja_alive: bool = False  # いる (animate) or ある: "is in <place>"


@dataclass(frozen=True)
class Adjective:
    en: str
    es: tuple[str, str]  # masculine, feminine
    de: str  # the stem: predicative as is, attributive with the weak ending
    fr: tuple[str, str]
    ja: str  # an i-adjective, same form before a noun and before です
    fr_before: bool = False  # "le petit chien", not "le chien petit"


NAMES = {  # the same person in every language; Japanese in katakana
    "Anna": "アンナ",
    "Maria": "マリア",
    "Laura": "ラウラ",
    "Nina": "ニナ",
    "Marco": "マルコ",
    "Leo": "レオ",
}
PLACES_BY_LANGUAGE = {  # English -> (es, de, fr, ja)
    "London": ("Londres", "London", "Londres", "ロンドン"),
    "Paris": ("París", "Paris", "Paris", "パリ"),
    "Berlin": ("Berlín", "Berlin", "Berlin", "ベルリン"),
    "Rome": ("Roma", "Rom", "Rome", "ローマ"),
    "Tokyo": ("Tokio", "Tokio", "Tokyo", "とうきょう"),
    # not Vienna: in a sentence espeak-ng spells ウィーン's small ィ and its ー as "Japanese letter"
    "Milan": ("Milán", "Mailand", "Milan", "ミラノ"),
}
NOUNS_BY_LANGUAGE = [
    Noun("dog", "perro", "m", "Hund", "m", "chien", "m", "いぬ", True),
    Noun("cat", "gato", "m", "Katze", "f", "chat", "m", "ねこ", True),
    Noun("car", "coche", "m", "Auto", "n", "voiture", "f", "くるま"),
    Noun("book", "libro", "m", "Buch", "n", "livre", "m", "ほん"),
    Noun("house", "casa", "f", "Haus", "n", "maison", "f", "いえ"),
    Noun("letter", "carta", "f", "Brief", "m", "lettre", "f", "てがみ"),
    Noun("table", "mesa", "f", "Tisch", "m", "table", "f", "つくえ"),
    Noun("window", "ventana", "f", "Fenster", "n", "fenêtre", "f", "まど"),
    Noun("bag", "bolsa", "f", "Tasche", "f", "sac", "m", "かばん"),
]
ADJECTIVES_BY_LANGUAGE = [
    Adjective("red", ("rojo", "roja"), "rot", ("rouge", "rouge"), "あかい"),
    Adjective("big", ("grande", "grande"), "groß", ("grand", "grande"), "おおきい", fr_before=True),
    Adjective("small", ("pequeño", "pequeña"), "klein", ("petit", "petite"), "ちいさい", fr_before=True),
    Adjective("new", ("nuevo", "nueva"), "neu", ("neuf", "neuve"), "あたらしい"),
    Adjective("old", ("viejo", "vieja"), "alt", ("vieux", "vieille"), "ふるい", fr_before=True),
    Adjective("white", ("blanco", "blanca"), "weiß", ("blanc", "blanche"), "しろい"),
    Adjective("black", ("negro", "negra"), "schwarz", ("noir", "noire"), "くろい"),
]
VERBS_BY_LANGUAGE = {  # simple past, with a direct object: English -> (es, de, fr, ja)
    "saw": ("vio", "sah", "a vu", "みました"),
    "found": ("encontró", "fand", "a trouvé", "みつけました"),
    "bought": ("compró", "kaufte", "a acheté", "かいました"),
    "sold": ("vendió", "verkaufte", "a vendu", "うりました"),
    "washed": ("lavó", "wusch", "a lavé", "あらいました"),
    "opened": ("abrió", "öffnete", "a ouvert", "あけました"),
    "painted": ("pintó", "malte", "a peint", "ぬりました"),
}
TIMES_BY_LANGUAGE = {  # English -> (es, de, fr, ja)
    "yesterday": ("ayer", "gestern", "hier", "きのう"),
    "today": ("hoy", "heute", "aujourd'hui", "きょう"),
}
# one more of each kind, never in train or eval: the `unseen` part of the test split
HELD_OUT_BY_LANGUAGE = {
    "names": {"Clara": "クララ"},
    "places": {"Madrid": ("Madrid", "Madrid", "Madrid", "マドリード")},
    "nouns": [Noun("piano", "piano", "m", "Klavier", "n", "piano", "m", "ピアノ")],
    "adjectives": [Adjective("heavy", ("pesado", "pesada"), "schwer", ("lourd", "lourde"), "おもい")],
    "verbs": {"carried": ("llevó", "trug", "a porté", "はこびました")},
}
