"""A run of a model that lists its languages (issue 38): the trainer measures its tokens per second per
language on its training shards before the first step (speechlm.data.token_rates), and the checkpoint's
config carries them, so a character language's answers are not cut short at eval or after export."""

from __future__ import annotations

import json

import numpy as np
import soundfile as sf

from speechlm import config as config_mod
from speechlm.config import Config, DataSet
from speechlm.data import token_rates
from speechlm.shard import NormalizeConfig, OutputConfig, ShardRecipe, Source, build
from speechlm.train.loop import Trainer

ROWS = [("hola a todos", "es"), ("el perro corre", "es"), ("いぬ が はしる", "ja"), ("ねこ が みる", "ja")] * 2


def test_a_multilingual_run_measures_its_rates_per_language(tmp_path, dist_world):
    rows = []
    for i, (said, lang) in enumerate(ROWS):
        t = np.arange(16000 + 4000 * (i % 3)) / 16000
        sf.write(tmp_path / f"{i}.wav", (0.2 * np.sin(2 * np.pi * (200 + 30 * i) * t)).astype(np.float32), 16000)
        rows.append({"audio": f"{i}.wav", "text": said, "locale": lang})
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    src = Source(
        name="ml", kind="manifest", path=str(tmp_path), splits={"train": ["train.jsonl"]}, language_column="locale"
    )
    recipe = ShardRecipe(name="ml", sources=[src], normalize=NormalizeConfig(truecase=False), output=OutputConfig())
    shards = build(recipe, tmp_path / "shards", workers=1)
    overrides = [
        f"training.output_dir={tmp_path / 'runs'}",
        "training.run_name=ml",
        "training.max_steps=1",
        "training.per_device_train_batch_size=4",
        "data.num_workers=0",
        f"data.train=[{{path: {shards}, split: train}}]",
        "data.eval=[]",
        "model.languages=[es, ja]",
    ]
    trainer = Trainer(config_mod.load(Config, "tiny", None, overrides))
    assert trainer.run() == 0
    want = token_rates.measure([DataSet(path=str(shards), split="train")], trainer.model.tokenizer)
    assert set(want) == {"es", "ja"} and want["ja"] > want["es"]
    assert trainer.model.cfg.tokens_per_second_by_language == want
    saved = json.loads((tmp_path / "runs" / "ml" / "final" / "config.json").read_text())
    assert saved["speechlm"]["tokens_per_second_by_language"] == want
