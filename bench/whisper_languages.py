#!/usr/bin/env python
"""Whisper base's own decoder on the multilingual corpus's espeak-ng speech: the reference that a
speech-LLM trained on it (shards/multilingual_demo.yaml) is compared with, per language.

    python bench/whisper_languages.py [--clips 20] [--languages en,es,de,fr,ja] [--kana]

For each language, `--clips` held-out sentences (the corpus's `seen` part) and as many random orders of
training words, synthesized as the shards would be (speechlm.demo.multilingual, seed 0); greedy
decoding of `offline/whisper-base` with the language pinned, and language detection with none given.
Scores: WER after Whisper's normalizers (English: speechlm.wer; others: BasicTextNormalizer); for ja,
CER over the text without spaces or punctuation. Whisper writes Japanese in kanji, the corpus in kana:
`--kana` turns Whisper's output into hiragana with pykakasi (GPL: not a speechlm dependency; install it
aside, e.g. `pip install --target /tmp/kakasi pykakasi` and PYTHONPATH=/tmp/kakasi).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _score(lang: str, refs: list[str], hyps: list[str], kana) -> float:
    import jiwer
    from transformers.models.whisper.english_normalizer import BasicTextNormalizer

    from speechlm.scoring import wer

    if lang == "en":
        return wer.score(refs, hyps)["wer"]
    norm = BasicTextNormalizer()
    if lang == "ja":
        squash = lambda s: "".join(norm(s).split())  # noqa: E731
        hyps = [kana(h) for h in hyps] if kana else hyps
        return jiwer.cer([squash(r) for r in refs], [squash(h) for h in hyps])
    return jiwer.wer([norm(r) for r in refs], [norm(h) for h in hyps])


def _kana():
    import pykakasi

    k = pykakasi.kakasi()
    return lambda s: "".join(item["hira"] for item in k.convert(s))


def run(langs: list[str], clips: int, kana: bool) -> dict:
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    from speechlm.demo import builtin, multilingual
    from speechlm.model import ids

    path = ids.resolve("offline/whisper-base")
    model = WhisperForConditionalGeneration.from_pretrained(path).eval()
    proc = WhisperProcessor.from_pretrained(path)
    by_id = {i: tok.strip("<|>") for tok, i in model.generation_config.lang_to_id.items()}
    to_kana = _kana() if kana else None
    out = {}
    for lang in langs:
        cfg = multilingual.MultilingualConfig(
            language=lang, test=2 * clips, unseen_test=0, random_test=clips, translate_test=0
        )
        rows = multilingual.rows(cfg, "test")
        t = time.perf_counter()
        waves = [builtin.synthesize(ref["audio"]) for _, _, ref in rows]
        synth = time.perf_counter() - t
        feats = proc(waves, sampling_rate=16000, return_tensors="pt").input_features
        with torch.no_grad():
            detected = [by_id[i] for i in model.detect_language(feats).tolist()]
            hyps = proc.batch_decode(model.generate(feats, language=lang, max_new_tokens=60), skip_special_tokens=True)
        res = {"lid": sum(d == lang for d in detected) / len(detected), "detected": sorted(set(detected))}
        for part in ("seen", "random"):
            sel = [(text, h) for (oid, text, _), h in zip(rows, hyps) if f"-{part}-" in oid]
            res[part] = round(_score(lang, [r for r, _ in sel], [h for _, h in sel], to_kana), 3)
        res["examples"] = [(rows[i][1], hyps[i]) for i in (0, len(rows) - 1)]
        res["synth_s_per_clip"] = round(synth / len(rows), 3)
        out[lang] = res
        print(lang, json.dumps(res, ensure_ascii=False), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clips", type=int, default=20, help="sentences and random orders per language, each")
    ap.add_argument("--languages", default="en,es,de,fr,ja")
    ap.add_argument("--kana", action="store_true", help="ja: Whisper's output to hiragana (pykakasi)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    run(args.languages.split(","), args.clips, args.kana)


if __name__ == "__main__":
    main()
