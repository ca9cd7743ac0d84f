"""WER of trained models on the demo's test split, clean and corrupted: noise at 20 / 10 / 5 dB SNR
and room reverberation (`speechlm.inference.condition`: the same draws for every model), per part.

    python bench/noisy_wer.py -m outputs/demo -m outputs/demo-aug [--shards shards/demo] [--threads 2]

For issue #21's question: does training with `data.augment` keep WER in a noisy room, and what does
it cost on clean speech? Speech is scored as the WER over the three speech parts together (seen,
unseen, random) and per part; non-speech as the share transcribed as empty.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from speechlm.inference import condition, evaluate, load_model  # noqa: E402
from speechlm.scoring import (
    by_part,  # noqa: E402
    wer,  # noqa: E402
)

CONDITIONS = [("clean", None, False), ("20 dB", 20.0, False), ("10 dB", 10.0, False), ("5 dB", 5.0, False)]
CONDITIONS += [("reverb", None, True)]
SPEECH = ("seen", "unseen", "random")


def score(rows: list[dict]) -> dict:
    parts = by_part.score(rows, "test")
    speech = [r for r in rows if not r["id"].startswith("nonspeech")]
    out = {p: parts[p]["wer"] for p in SPEECH if p in parts}
    out["speech"] = wer.score([r["reference"] for r in speech], [r["hypothesis"] for r in speech])["wer"]
    out["empty"] = parts["nonspeech"]["empty_share"] if "nonspeech" in parts else float("nan")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", action="append", required=True, help="a run dir or checkpoint (repeatable)")
    ap.add_argument("--shards", default="shards/demo")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    results = {}
    for m in a.model:
        model = load_model(m)
        for name, snr, reverb in CONDITIONS:
            torch.manual_seed(0)
            suffix, corrupt = condition(snr, None, reverb)
            r = evaluate(model, a.shards, split="test", batch_size=16, corrupt=corrupt, suffix=suffix)
            results[(m, name)] = score(r["rows"])
            s = results[(m, name)]
            print(f"{m} {name}: speech {100 * s['speech']:.1f}%, empty {100 * s['empty']:.0f}%", flush=True)
    print("\n| model | condition | WER speech (3 parts) | x clean | seen | unseen | random | non-speech empty |")
    print("|---|---|---|---|---|---|---|---|")
    for m in a.model:
        clean = results[(m, "clean")]["speech"]
        for name, _, _ in CONDITIONS:
            s = results[(m, name)]
            cells = [f"{100 * s[p]:.1f}%" for p in SPEECH]
            print(
                f"| {m} | {name} | {100 * s['speech']:.1f}% | {s['speech'] / clean:.2f} | "
                + " | ".join(cells)
                + f" | {100 * s['empty']:.0f}% |"
            )


if __name__ == "__main__":
    main()
