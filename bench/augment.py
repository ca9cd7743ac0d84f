"""CPU cost of each augmentation transform (speechlm.data.augment) against what the reader already does
per clip (FLAC decoding and Granite features), on the same clips, in one process, torch on one thread.

    python bench/augment.py [--clips 40] [--seconds 8] [--repeats 2]

Reports CPU milliseconds per clip; interleaved repeats, best of N (the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import soundfile as sf  # noqa: E402
import torch  # noqa: E402

from speechlm import audio, features  # noqa: E402
from speechlm.data import augment as A  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--clips", type=int, default=40)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    n = int(args.seconds * audio.SAMPLE_RATE)
    waves = [(0.1 * rng.standard_normal(n)).astype(np.float32) for _ in range(args.clips)]
    flacs = [audio.encode_flac(w) for w in waves]
    fe = features.FeatureExtractor()
    banks = {c: A.coloured_noise(A.NOISE_BANK, c, rng) for c in ("white", "pink", "brown")}
    rirs = {rt: A.synthetic_rir(rng, rt, 5.0) for rt in (0.2, 0.5, 0.8)}
    parts = {
        "decode FLAC (reader)": lambda i, w: audio.load(flacs[i]),
        "Granite features (collator)": lambda i, w: fe([w]),
        "speed 0.9 (soxr HQ)": lambda i, w: A.speed(w, 0.9),
        "speed 1.1 (soxr HQ)": lambda i, w: A.speed(w, 1.1),
        "noise from the bank at an SNR": lambda i, w: A.mix_at_snr(w, A.cyclic(banks["pink"], 1000 * i, len(w)), 10.0),
        "reverb, RT60 0.2 s": lambda i, w: A.reverberate(w, rirs[0.2]),
        "reverb, RT60 0.5 s": lambda i, w: A.reverberate(w, rirs[0.5]),
        "reverb, RT60 0.8 s": lambda i, w: A.reverberate(w, rirs[0.8]),
        "synthetic RIR, RT60 0.5 s": lambda i, w: A.synthetic_rir(np.random.default_rng(i), 0.5, 5.0),
        "band limit 8 kHz (soxr)": lambda i, w: A.bandlimit(w, 8000),
        "clipping": lambda i, w: A.clip_peaks(w, 0.5),
        "draws of one clip": lambda i, w: A.ClipDraws(44, 0, f"clip{i}"),
    }
    for name, (fmt, sub) in A.CODECS.items():
        if sub in sf.available_subtypes(fmt):
            parts[f"codec {name} (libsndfile)"] = lambda i, w, name=name: A.codec(w, name, 0.5)
    best: dict[str, float] = {}
    for _ in range(args.repeats):
        for name, fn in parts.items():
            fn(0, waves[0])
            c0 = time.process_time()
            for i, w in enumerate(waves):
                fn(i, w)
            ms = (time.process_time() - c0) / len(waves) * 1000
            best[name] = min(best.get(name, ms), ms)
    base = best["decode FLAC (reader)"] + best["Granite features (collator)"]
    print(
        f"{args.clips} clips of {args.seconds:g} s, libsndfile {sf.__libsndfile_version__}, torch threads "
        f"{torch.get_num_threads()}; CPU ms per clip, best of {args.repeats}"
    )
    for name, ms in best.items():
        print(f"  {name:34s} {ms:8.2f} ms   {100 * ms / base:6.1f}% of decode + features")


if __name__ == "__main__":
    sys.exit(main())
