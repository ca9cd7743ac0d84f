"""The model card (README.md) of a model folder: what it is, its bases by Hub id, its licence (the bases'
where their cards declare one), the recipe, the data, the run's own eval figures with the clips each was
measured on (also as the Hub's `model-index` metadata) and how to use it."""

from __future__ import annotations

from pathlib import Path

from speechlm.model.folder import card_languages as by_language

USAGE = """\
```python
from transformers import AutoModel, pipeline

asr = pipeline("automatic-speech-recognition", model="{repo}", trust_remote_code=True)
print(asr("meeting.flac")["text"])            # any length: cut at its pauses, segments of at most {window:g} s

model = AutoModel.from_pretrained("{repo}", trust_remote_code=True)
print(model.transcribe([wave_16k_mono_float32]))
```
or with speechlm: `speechlm transcribe -m {repo} meeting.flac`.
"""


def _yaml_list(items) -> str:
    return "".join(f"\n  - {i}" for i in items)


def base_name(ref: dict) -> str:
    """A base as the card names it: its Hub id (an offline conversion's upstream id), else its name."""
    return ref.get("hub_id") or ref["id"]


METRICS = {"wer": "WER", "empty_share": "said empty"}  # by_part's scores: WER, or a non-speech part's share said empty


def eval_rows(info: dict) -> list[dict]:
    """{"dataset", "clips", "metric" ("wer" | "empty_share"), "value" (%)} rows: `speechlm eval` results
    given in `eval`, then the run's last in-training eval (`training_eval`: WER per eval set, per part
    where the set has parts; a non-speech part by the share of its clips said empty), each with the
    number of clips it was measured on where the run recorded it (`eval/clips/<part>`)."""
    rows = [
        {"dataset": r["dataset"], "clips": r.get("clips"), "metric": "wer", "value": 100 * r["wer"]}
        for r in info.get("eval") or []
    ]
    last = info.get("training_eval") or {}
    scores = last.get("scores") or {}
    sets = ", ".join(last.get("sets") or []) or "eval"
    for key, value in sorted(scores.items()):
        if by_language.is_language_key(key, "eval/"):
            continue  # a language's score, not a part's: language_rows
        metric = next((m for m in METRICS if key == f"eval/{m}" or key.startswith(f"eval/{m}/")), None)
        if metric is None:
            continue
        part = key.removeprefix(f"eval/{metric}").strip("/")
        clips = scores.get(f"eval/clips/{part}" if part else "eval/clips")
        name = f"{sets} ({part})" if part else sets
        rows.append(
            {"dataset": name, "clips": None if clips is None else int(clips), "metric": metric, "value": 100 * value}
        )
    return rows


def language_rows(info: dict) -> list[dict]:
    """The scores per language and task (speechlm.model.folder.card_languages) of the `speechlm eval`
    results given in `eval`, then of the run's last in-training eval."""
    rows = [
        row for r in info.get("eval") or [] for row in by_language.language_rows(r.get("languages") or {}, r["dataset"])
    ]
    last = info.get("training_eval") or {}
    sets = ", ".join(last.get("sets") or []) or "eval"
    return rows + by_language.language_rows(last.get("scores") or {}, sets, "eval/")


def licence(info: dict, bases: dict) -> tuple[str, str | None]:
    """(the card's `license`, a sentence on it or None): given in `info`, else the bases' licences
    (their own cards' `license`, recorded in the folder's base references) where all are known and
    agree; else `other`, saying which base's licence is what or not known."""
    if info.get("license"):
        return info["license"], None
    known = {part: ref.get("license") for part, ref in bases.items()}
    if all(known.values()) and len(set(known.values())) == 1:
        return next(iter(known.values())), None
    said = "; ".join(
        f"the {part} `{base_name(bases[part])}`: " + (f"`{lic}`" if lic else "not recorded (see its own card)")
        for part, lic in known.items()
    )
    return "other", f"Licence: bound by its bases' licences, {said}."


def _model_index(name: str, rows: list[dict], per_language: list[dict] = ()) -> list[str]:
    if not rows and not per_language:
        return []
    out = ["model-index:", f"- name: {name}", "  results:"]
    for r in rows:
        out += [
            "  - task:",
            "      type: automatic-speech-recognition",
            "      name: Automatic Speech Recognition",
            "    dataset:",
            f"      name: {r['dataset']}",
            f"      type: {r['dataset'].split(' ')[0]}",
            "    metrics:",
            f"    - type: {r['metric']}",
            f"      value: {r['value']:.2f}",
            f"      name: {METRICS[r['metric']]}" + (f" ({r['clips']} clips)" if r["clips"] is not None else ""),
        ]
    for r in per_language:
        out += by_language.index_entry(r)
    return out


def render(model, info: dict, merged: bool = False) -> str:
    """`info` may hold: name, repo, bases (the folder's base references), recipe (dict of settings worth
    stating), data (list of {"name", ...}), eval (`speechlm eval` results), training_eval (the run's last
    eval: loss, scores), steps, license (else derived from the bases', `licence`)."""
    cfg = model.cfg
    bases = info.get("bases") or {"encoder": {"id": cfg.audio_model_id}, "decoder": {"id": cfg.text_model_id}}
    encoder, decoder = base_name(bases["encoder"]), base_name(bases["decoder"])
    name = info.get("name") or "speechlm model"
    rows, per_language = eval_rows(info), language_rows(info)
    spoken = by_language.languages(list(getattr(cfg, "languages", None) or []), per_language)
    license_id, license_line = licence(info, bases)
    adapter = (
        "with LoRA merged into its weights"
        if merged
        else f"with a LoRA adapter (r{cfg.lora_rank}, alpha {cfg.lora_alpha})"
    )
    lines = [
        *_front_matter(license_id, name, [encoder, decoder], rows, per_language, spoken),
        f"# {name}",
        "",
        f"A speech-LLM for transcription, trained with speechlm: a frozen `{encoder}` encoder ({model.family.name}) "
        f"feeds a trained projector into `{decoder}` {adapter}.",
        "",
        *([license_line, ""] if license_line else []),
        *_recipe_section(cfg, info),
        *_data_section(info),
        *_eval_section(info, rows),
        *by_language.table(per_language),
        *_use_section(model, info, merged),
    ]
    return "\n".join(lines) + "\n"


def _front_matter(license_id: str, name: str, bases: list[str], rows, per_language, spoken) -> list[str]:
    """The Hub's YAML metadata block (license, languages, tags, base models, model-index: one result per
    eval set or part, then one per language and task) and the blank line after it."""
    return [
        "---",
        "library_name: transformers",
        "pipeline_tag: automatic-speech-recognition",
        f"license: {license_id}",
        "language:" + _yaml_list(spoken),
        "tags:" + _yaml_list(["speechlm", "speech-llm", "asr"]),
        "base_model:" + _yaml_list(bases),
        *_model_index(name, rows, per_language),
        "---",
        "",
    ]


def _recipe_section(cfg, info: dict) -> list[str]:
    """The projector and prompt, then the settings `info` states (and the step count)."""
    recipe = {
        "projector": f"{cfg.projector_pool_stride} frames stacked, MLP width {cfg.projector_hidden_dim}",
        "prompt": repr(cfg.prompt),
        **info.get("recipe", {}),
    }
    if "steps" in info:
        recipe["steps"] = info["steps"]
    return ["## Recipe", "", *(f"- {k}: {v}" for k, v in recipe.items())]


def _data_section(info: dict) -> list[str]:
    data = info.get("data") or []
    items = [f"- {d['name']}: " + ", ".join(f"{k} {v}" for k, v in d.items() if k != "name") for d in data]
    return ["", "## Data", "", *(items or ["- not recorded"])]


def _eval_section(info: dict, rows: list[dict]) -> list[str]:
    """The run's last eval loss and a WER table, or how to evaluate when there is neither."""
    lines = ["", "## Evaluation", ""]
    last = info.get("training_eval") or {}
    if "loss" in last:
        lines += [f"Eval loss at step {last['step']}: {last['loss']:.4f}.", ""]
    if rows:
        lines += ["| dataset | clips | WER % | said empty % |", "|---|---|---|---|"]
        for r in rows:
            wer, empty = (f"{r['value']:.2f}", "") if r["metric"] == "wer" else ("", f"{r['value']:.2f}")
            lines.append(f"| {r['dataset']} | {r['clips'] if r['clips'] is not None else ''} | {wer} | {empty} |")
        if any(r["metric"] == "empty_share" for r in rows):
            lines += [
                "",
                "A non-speech part (silence, noise: its references are empty, so WER is not defined on it) is "
                "scored by the share of its clips transcribed as empty.",
            ]
    if not rows and "loss" not in last:
        lines += ["Not evaluated yet: `speechlm eval -m THIS_FOLDER -d DATASET`."]
    return lines


def _use_section(model, info: dict, merged: bool) -> list[str]:
    """How to load the folder; with LoRA merged, what `decoder/` is for."""
    window = min(20.0, model.family.max_seconds or 20.0)
    lines = ["", "## Use", "", USAGE.format(repo=info.get("repo") or ".", window=window)]
    if merged:
        lines += [
            "`decoder/` is the decoder with LoRA merged in, a plain causal LM for serving engines; feed it the "
            "projected audio as prompt embeddings.",
            "",
        ]
    return lines


def write_card(out: Path, model, info: dict, merged: bool = False) -> Path:
    path = Path(out) / "README.md"
    path.write_text(render(model, info, merged))
    return path
