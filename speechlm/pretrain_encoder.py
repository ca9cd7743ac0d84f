"""Word-level CTC pretraining of a Granite Speech 5 encoder on a shard set.

The production encoder is a CTC-trained model that the speech-LLM keeps frozen. Offline there is
no pretrained tiny twin to download, and a random encoder trained end to end through a random
decoder learns to recognise training *sentences* rather than words (held-out WER stays ~40-90%).
So the demo makes a pretrained encoder first: a few minutes of CTC over the corpus' words turn the
random tiny encoder into a word spotter, saved as a plain `GraniteSpeech5ForCTC` folder that the
speech-LLM recipe then loads by path and keeps frozen, exactly as it does the real one.
Word-level, not character-level: the encoder emits 12.5 frames/s, fewer than the characters per
second of speech, which CTC cannot align.

    python -m speechlm.pretrain_encoder --shards DIR --out DIR [--init tiny/granite_speech5] [--steps N]
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import re
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch
import webdataset as wds

from speechlm import tiny, wer
from speechlm.config import ConfigError, DataSet, cli_errors
from speechlm.data.loader import TrainLoader
from speechlm.features import FeatureExtractor

log = logging.getLogger("speechlm.pretrain_encoder")
WORD = re.compile(r"[a-z']+")
BLANK = 0


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def _texts(shards: Path, split: str) -> list[tuple[str, object]]:
    """(text, flac bytes) of a split, read straight from the tars."""
    manifest = json.loads((shards / "manifest.json").read_text())
    if split not in manifest["splits"]:
        raise ConfigError(f"{shards}: no '{split}' split")
    urls = [str(shards / s["file"]) for s in manifest["splits"][split]["shards"]]
    return [(json.loads(s["json"])["text"], s["flac"]) for s in wds.WebDataset(urls, shardshuffle=False)]


class CTCCollator:
    """Features + word-id labels (-100 padded); picklable, it runs in the loader's workers."""

    def __init__(self, vocab: list[str]):
        self.vocab = vocab
        self.index = {w: i + 1 for i, w in enumerate(vocab)}  # 0 is the CTC blank
        self.unk = len(vocab) + 1
        self.features = FeatureExtractor()

    def __call__(self, samples: list[dict]) -> dict:
        feats, mask = self.features([np.asarray(s["audio"], dtype=np.float32) for s in samples])
        labs = [[self.index.get(w, self.unk) for w in words(s["text"])] for s in samples]
        labels = torch.full((len(samples), max(1, max(map(len, labs)))), -100, dtype=torch.long)
        for i, lab in enumerate(labs):
            labels[i, : len(lab)] = torch.tensor(lab, dtype=torch.long)
        return {"input_features": feats, "feature_mask": mask, "labels": labels,
                "ids": [s["id"] for s in samples]}

    def decode(self, ids: list[int]) -> str:
        out, prev = [], BLANK
        for t in ids:
            if t != prev and t != BLANK:
                out.append(self.vocab[t - 1] if 0 < t <= len(self.vocab) else "<unk>")
            prev = t
        return " ".join(out)


def _score(model, collator: CTCCollator, clips: list, batch_size: int = 16) -> float:
    from speechlm import audio

    refs, hyps = [], []
    model.eval()
    with torch.no_grad():
        for i in range(0, len(clips), batch_size):
            part = clips[i : i + batch_size]
            b = collator([{"id": str(k), "text": t, "audio": audio.load(f)} for k, (t, f) in enumerate(part)])
            seq = model.generate(input_features=b["input_features"], attention_mask=b["feature_mask"])
            hyps += [collator.decode(row) for row in seq.tolist()]
            refs += [t for t, _ in part]
    model.train()
    return wer.score(refs, hyps)["wer"]


def pretrain(shards: str | Path, out: str | Path, init: str = "tiny/granite_speech5", steps: int = 1500,
             batch_size: int = 16, lr: float = 2e-3, warmup: int = 100, seed: int = 0) -> dict:
    from transformers import GraniteSpeech5ForCTC

    shards, out = Path(shards), Path(out)
    if (out / "ctc_result.json").is_file():  # finished before: reuse it
        return json.loads((out / "ctc_result.json").read_text())
    torch.manual_seed(seed)
    src = Path(tiny.resolve(init))
    model = GraniteSpeech5ForCTC.from_pretrained(src)
    counts = Counter(w for t, _ in _texts(shards, "train") for w in words(t))
    vocab = [w for w, _ in counts.most_common(model.config.vocab_size - 2)]  # room for blank and unk
    collator = CTCCollator(vocab)
    loader = TrainLoader([DataSet(path=str(shards), split="train")], collator, batch_size=batch_size,
                         num_workers=1, seed=seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    model.train()
    step, t0, losses = 0, time.perf_counter(), []
    while step < steps:
        for batch in loader:
            if step >= steps:
                break
            step += 1
            scale = min(1.0, step / warmup) * 0.5 * (1 + math.cos(math.pi * max(0, step - warmup) / max(1, steps - warmup)))
            for g in opt.param_groups:
                g["lr"] = lr * scale
            res = model(input_features=batch["input_features"], attention_mask=batch["feature_mask"],
                        labels=batch["labels"])
            res.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(round(res.loss.item(), 4))
            if step % 100 == 0 or step == steps:
                print(f"ctc step {step}/{steps}: loss {losses[-1]:.3f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    held_out = _score(model, collator, _texts(shards, "eval"))
    result = {"steps": steps, "losses": losses, "eval_word_wer": held_out, "vocab_size": len(vocab),
              "seconds": round(time.perf_counter() - t0, 1), "init": init}
    print(f"ctc encoder: held-out word WER {100 * held_out:.1f}% after {steps} steps", flush=True)
    tmp = out.with_name(out.name + ".tmp")
    model.save_pretrained(tmp)
    (tmp / "preprocessor_config.json").write_text((src / "preprocessor_config.json").read_text())
    (tmp / "ctc_vocab.json").write_text(json.dumps(["<blank>"] + vocab + ["<unk>"]))
    (tmp / "ctc_result.json").write_text(json.dumps(result, indent=1))
    if out.exists():
        import shutil

        shutil.rmtree(out)
    tmp.rename(out)  # whole or absent: a killed run leaves no half-written encoder behind
    return result


@cli_errors
def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m speechlm.pretrain_encoder", description=__doc__.split("\n")[0])
    ap.add_argument("--shards", required=True, help="a built shard set (train and eval splits)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--init", default="tiny/granite_speech5", help="encoder to start from (tiny id or folder)")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    args = ap.parse_args(argv)
    if not (Path(args.shards) / "manifest.json").is_file():
        raise ConfigError(f"--shards {args.shards}: no manifest.json (build it with python -m speechlm.shard)")
    if args.steps <= 0:
        raise ConfigError(f"--steps must be positive, got {args.steps}")
    return pretrain(args.shards, args.out, args.init, args.steps, args.batch_size, args.lr)


if __name__ == "__main__":
    main()
