"""The model card (README.md) of a model folder: what it is, its bases by Hub id, the recipe, the data,
the run's own eval figures (also as the Hub's `model-index` metadata) and how to use it."""

from __future__ import annotations

from pathlib import Path

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


def eval_rows(info: dict) -> list[dict]:
    """{"dataset", "wer" (%), "clips"?} rows: speechlm.eval results given in `eval`, then the run's last
    in-training eval (`training_eval`: WER per eval set, per part where the set has parts)."""
    rows = [{"dataset": r["dataset"], "clips": r.get("clips"), "wer": 100 * r["wer"]} for r in info.get("eval") or []]
    last = info.get("training_eval") or {}
    sets = ", ".join(last.get("sets") or []) or "eval"
    for key, value in sorted((last.get("scores") or {}).items()):
        if key.startswith("eval/wer"):
            part = key.removeprefix("eval/wer").strip("/")
            rows.append({"dataset": f"{sets} ({part})" if part else sets, "clips": None, "wer": 100 * value})
    return rows


def _model_index(name: str, rows: list[dict]) -> list[str]:
    if not rows:
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
            "    - type: wer",
            f"      value: {r['wer']:.2f}",
            "      name: WER",
        ]
    return out


def render(model, info: dict, merged: bool = False) -> str:
    """`info` may hold: name, repo, bases (the folder's base references), recipe (dict of settings worth
    stating), data (list of {"name", ...}), eval (speechlm.eval results), training_eval (the run's last
    eval: loss, scores), steps, license."""
    cfg = model.cfg
    bases = info.get("bases") or {"encoder": {"id": cfg.audio_model_id}, "decoder": {"id": cfg.text_model_id}}
    encoder, decoder = base_name(bases["encoder"]), base_name(bases["decoder"])
    name = info.get("name") or "speechlm model"
    rows = eval_rows(info)
    adapter = (
        "with LoRA merged into its weights"
        if merged
        else f"with a LoRA adapter (r{cfg.lora_rank}, alpha {cfg.lora_alpha})"
    )
    lines = [
        *_front_matter(info, name, [encoder, decoder], rows),
        f"# {name}",
        "",
        f"A speech-LLM for transcription, trained with speechlm: a frozen `{encoder}` encoder ({model.family.name}) "
        f"feeds a trained projector into `{decoder}` {adapter}.",
        "",
        *_recipe_section(cfg, info),
        *_data_section(info),
        *_eval_section(info, rows),
        *_use_section(model, info, merged),
    ]
    return "\n".join(lines) + "\n"


def _front_matter(info: dict, name: str, bases: list[str], rows: list[dict]) -> list[str]:
    """The Hub's YAML metadata block (license, tags, base models, model-index) and the blank line after it."""
    return [
        "---",
        "library_name: transformers",
        "pipeline_tag: automatic-speech-recognition",
        f"license: {info.get('license', 'other')}",
        "tags:" + _yaml_list(["speechlm", "speech-llm", "asr"]),
        "base_model:" + _yaml_list(bases),
        *_model_index(name, rows),
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
        lines += ["| dataset | clips | WER % |", "|---|---|---|"]
        lines += [f"| {r['dataset']} | {r['clips'] if r['clips'] is not None else ''} | {r['wer']:.2f} |" for r in rows]
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
