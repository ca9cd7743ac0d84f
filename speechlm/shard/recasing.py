"""Which truecaser re-cases which labels: re-casing only where a truecaser exists for the language
(issue 38, docs/languages.md).

A source is re-cased when its labels are all-lowercase or all-uppercase (`Source.truecase`). Its rows
are grouped by language (the source's `language`, or its column's per row; None: not stated), and each
group gets its model:
- not stated: as before languages existed: `normalize.truecase_model`, else one trained on the cased
  labels of the recipe's other sources, else the English model speechlm ships (`truecaser.model`);
- a stated language L: `normalize.truecase_models[L]`, else one trained on the cased labels of the
  recipe's other sources in L, else, for English only, the shipped model (`truecaser.L.model`);
- a language with none of these: all-uppercase labels stop the build with a ConfigError naming the
  source (an English model would mis-case them, and lower-casing them all would lose what the language
  capitalizes, German's nouns say); all-lowercase labels are left as they are, with a warning.
Test labels never train a model.
"""

from __future__ import annotations

import logging
from pathlib import Path

from speechlm.config import ConfigError
from speechlm.shard import normalize as N
from speechlm.shard import truecase

log = logging.getLogger(__name__)

TRUECASER = "truecaser.model"  # the model of labels that state no language (as before issue 38)


def row_language(row: list) -> str | None:
    """A listed row's language ([id, orig_id, text, ref(, labels)]); None when its source states none."""
    return row[4].get("language") if len(row) > 4 and isinstance(row[4], dict) else None


def _groups(units: list[dict], targets: list[str]) -> dict[str | None, dict[str, list[str]]]:
    """language -> source -> the labels of that source's rows in it, for the sources to re-case."""
    groups: dict = {}
    for u in units:
        if u["source"] in targets:
            for r in u["rows"]:
                groups.setdefault(row_language(r), {}).setdefault(u["source"], []).append(r[2])
    return groups


def _cased_text(cfg, units: list[dict], targets: list[str], lang: str | None) -> tuple[list[str], list[str]]:
    """(the cased labels a model for `lang` trains on, their sources): the other sources' (in `lang`
    when it is stated), test labels left out."""
    rows = [
        (u["source"], r[2])
        for u in units
        if u["source"] not in targets and u["split"] != "test"
        for r in u["rows"]
        if r[2] and (lang is None or row_language(r) == lang)
    ]
    if lang is None:  # as before languages existed: every other source is named
        return [t for _, t in rows], [s.name for s in cfg.sources if s.name not in targets]
    return [t for _, t in rows], [s.name for s in cfg.sources if s.name in {name for name, _ in rows}]


def _model(cfg, units, targets, lang, out: Path):
    """(the truecaser for `lang`, its manifest info) or (None, None) when the language has none."""
    path = out / (TRUECASER if lang is None else f"truecaser.{lang}.model")
    given = cfg.normalize.truecase_model if lang is None else cfg.normalize.truecase_models.get(lang)
    text, trained_on = _cased_text(cfg, units, targets, lang)
    if given:
        key = "normalize.truecase_model" if lang is None else f"normalize.truecase_models.{lang}"
        tc, trained_on, model = truecase.load(given, path, key), [], str(given)
    elif text:
        tc, model = truecase.train(text, path), "trained:" + ",".join(trained_on)
    elif lang in (None, "en"):  # nothing cased in the recipe: the shipped English model
        tc, trained_on, model = truecase.builtin(path), [], truecase.BUILTIN_NAME
    else:
        return None, None
    info = {"file": path.name, "sha256": truecase.file_sha256(path), "trained_on": trained_on, "model": model}
    return tc, info


def _no_truecaser(cfg, lang: str, labels: dict[str, list[str]]) -> None:
    """All-uppercase labels in a language with no truecaser: a ConfigError naming the source; all-lowercase
    ones are kept as they are (a warning)."""
    keys = {s.name: f"sources[{i}]" for i, s in enumerate(cfg.sources)}
    for name, texts in labels.items():
        if any(c.isupper() for t in texts for c in t):
            raise ConfigError(
                f"{keys[name]} ({name}): its {lang} labels are all uppercase and there is no {lang} truecaser to "
                f"re-case them (one ships for English only); give normalize.truecase_models: {{{lang}: FILE}} (a "
                f"Moses truecaser model), add a cased {lang} source to train one on, or keep the labels as they "
                f"are with {keys[name]}.truecase: false"
            )
        log.warning("%s: its %s labels are all lowercase and stay so: no %s truecaser", name, lang, lang)


def recase(cfg, units: list[dict], out: Path) -> tuple[dict | None, list[str]]:
    """Re-case the labels of all-lowercase/all-uppercase sources in place; (manifest info, the sources
    re-cased). The info has the shape it had before languages existed when one model served (one group);
    with several, {"by_language": {language or "unstated": info}}, each info listing its `applied_to`."""
    if not cfg.normalize.truecase:
        return None, []
    labels = {s.name: [r[2] for u in units if u["source"] == s.name for r in u["rows"]] for s in cfg.sources}
    targets = [
        s.name for s in cfg.sources if s.truecase is True or (s.truecase is None and N.is_uncased(labels[s.name]))
    ]
    groups = sorted(_groups(units, targets).items(), key=lambda kv: kv[0] or "")
    for lang, by_source in groups:  # a language with no truecaser is named before any model is trained
        if lang not in (None, "en") and not cfg.normalize.truecase_models.get(lang):
            if not _cased_text(cfg, units, targets, lang)[0]:
                _no_truecaser(cfg, lang, by_source)
    infos, done = {}, []
    for lang, by_source in groups:
        tc, info = _model(cfg, units, targets, lang, out)
        if tc is None:
            continue
        for u in units:
            if u["source"] in by_source:
                u["rows"] = [
                    [r[0], r[1], truecase.apply(tc, r[2]) if r[2] else r[2], *r[3:]] if row_language(r) == lang else r
                    for r in u["rows"]
                ]
        info["applied_to"] = [s for s in targets if s in by_source]
        if info["model"] == truecase.BUILTIN_NAME:
            info["about"] = truecase.BUILTIN_ABOUT
        if lang is not None:
            info["language"] = lang
        infos["unstated" if lang is None else lang] = info
        done += [s for s in by_source if s not in done]
        log.info(
            "truecased %s (%s) with %s (sha256 %s)", ", ".join(by_source), lang, info["model"], info["sha256"][:12]
        )
    if not infos:
        return None, []
    return (next(iter(infos.values())) if len(infos) == 1 else {"by_language": infos}), [
        s for s in targets if s in done
    ]
