"""Real Whisper weights: the variable-length encoder (no 30 s padding) against the stock padded one.

For espeak-ng sentences, prints per clip the cosine similarity of the variable-length encoder's frames
to the stock encoder's frames on the same clip padded to 30 s, and the greedy transcripts of Whisper's
own decoder from each (that decoder was trained on padded inputs only; speechlm never uses it), plus
whether the clip encoded alone and in a batch give the same transcript.

    python bench/whisper_varlen.py --model DIR   # a WhisperForConditionalGeneration folder with its tokenizer
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path[:0] = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")]

import torch  # noqa: E402

SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "please call stella and ask her to bring these things with her from the store",
    "seven green houses stand near the river",
    "hello world",
]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    args = ap.parse_args(argv)
    from transformers import AutoTokenizer, WhisperFeatureExtractor, WhisperForConditionalGeneration
    from transformers.modeling_outputs import BaseModelOutput

    from speechlm import audio
    from speechlm.model import parts
    from speechlm.model.encoders import family_for

    full = WhisperForConditionalGeneration.from_pretrained(args.model).eval()
    tok = AutoTokenizer.from_pretrained(args.model)
    fam = family_for(args.model)
    enc = parts.load_encoder(fam, args.model, torch.float32).eval()
    with tempfile.TemporaryDirectory() as tmp:
        waves = []
        for i, s in enumerate(SENTENCES):
            subprocess.run(["espeak-ng", "-w", f"{tmp}/{i}.wav", s], check=True)
            waves.append(audio.load(f"{tmp}/{i}.wav"))

    def decode(hidden):
        out = full.generate(encoder_outputs=BaseModelOutput(last_hidden_state=hidden), max_new_tokens=40)
        return tok.decode(out[0], skip_special_tokens=True).strip()

    with torch.no_grad():
        x = torch.from_numpy(
            WhisperFeatureExtractor(feature_size=fam.config.num_mel_bins)(
                waves, sampling_rate=16000, return_tensors="np"
            )["input_features"]
        )
        stock = full.model.encoder(x).last_hidden_state
        feats, mask = fam.features(waves)
        hidden, frames = fam.encode(enc, feats, mask)
        for i, (w, s) in enumerate(zip(waves, SENTENCES)):
            n = int(frames[i])
            cos = torch.nn.functional.cosine_similarity(hidden[i, :n], stock[i, :n], dim=-1)
            f1, m1 = fam.features([w])
            alone, _ = fam.encode(enc, f1, m1)
            print(
                f"{len(w) / 16000:.2f} s, {n} frames: cosine to stock mean {cos.mean():.3f}, min {cos.min():.3f}, "
                f"last 5 frames {cos[-5:].mean():.3f}"
            )
            print(f"  reference: {s}")
            print(f"  stock (30 s padded): {decode(stock[i : i + 1])}")
            var = decode(hidden[i : i + 1, :n])
            print(f"  variable length:     {var}  (alone == in batch: {decode(alone) == var})")


if __name__ == "__main__":
    main()
