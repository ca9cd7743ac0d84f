"""The model card (README.md) of an export: recipe, data, eval WER per dataset, usage."""

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
or with speechlm: `python -m speechlm.transcribe -m {repo} meeting.flac`.
"""


def _yaml_list(items) -> str:
    return "".join(f"\n  - {i}" for i in items)


def render(model, info: dict, merged: bool = False) -> str:
    """`info` may hold: repo, recipe (dict of the training settings worth stating), data (list of
    {"name", "hours"|"clips"}), eval (list of speechlm.eval results), steps, license."""
    cfg = model.cfg
    repo = info.get("repo", "PATH_OR_REPO")
    window = min(20.0, model.family.max_seconds or 20.0)
    lines = [
        "---",
        "library_name: transformers",
        "pipeline_tag: automatic-speech-recognition",
        f"license: {info.get('license', 'other')}",
        "tags:" + _yaml_list(["speechlm", "speech-llm", "asr"]),
        "base_model:" + _yaml_list([cfg.audio_model_id, cfg.text_model_id]),
        "---",
        "",
        f"# {info.get('name', Path(repo).name or 'speechlm model')}",
        "",
        "A speech-LLM for transcription trained with [speechlm](https://github.com/): a frozen "
        f"`{cfg.audio_model_id}` encoder ({model.family.name}) feeds a trained projector into "
        f"`{cfg.text_model_id}`"
        + (
            " with LoRA merged into its weights."
            if merged
            else f" with a LoRA adapter (r{cfg.lora_rank}, alpha {cfg.lora_alpha})."
        ),
        "",
        "## Recipe",
        "",
    ]
    recipe = {
        "projector": f"{cfg.projector_pool_stride} frames stacked, MLP width {cfg.projector_hidden_dim}",
        "prompt": repr(cfg.prompt),
        **info.get("recipe", {}),
    }
    if "steps" in info:
        recipe["steps"] = info["steps"]
    lines += [f"- {k}: {v}" for k, v in recipe.items()]
    lines += ["", "## Data", ""]
    data = info.get("data") or []
    lines += [f"- {d['name']}: " + ", ".join(f"{k} {v}" for k, v in d.items() if k != "name") for d in data] or [
        "- not recorded"
    ]
    lines += ["", "## Evaluation", ""]
    evals = info.get("eval") or []
    if evals:
        lines += ["| dataset | clips | WER % | orthographic WER % |", "|---|---|---|---|"]
        lines += [
            f"| {r['dataset']} | {r['clips']} | {100 * r['wer']:.2f} | {100 * r['orthographic_wer']:.2f} |"
            for r in evals
        ]
    else:
        lines += ["Not evaluated at export time: `python -m speechlm.eval -m THIS_FOLDER -d DATASET`."]
    lines += ["", "## Use", "", USAGE.format(repo=repo, window=window)]
    if merged:
        lines += [
            "`decoder/` is the decoder with LoRA merged in, a plain causal LM for serving engines; feed it the "
            "projected audio as prompt embeddings.",
            "",
        ]
    return "\n".join(lines) + "\n"


def write_card(out: Path, model, info: dict, merged: bool = False) -> Path:
    path = Path(out) / "README.md"
    path.write_text(render(model, info, merged))
    return path
