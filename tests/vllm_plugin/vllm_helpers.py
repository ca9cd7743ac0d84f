"""Helpers of the vLLM plugin's tests: a tiny model folder vLLM's CPU build can run, and the plugin's own
virtualenv (`make vllm`: .venv-vllm) to run vLLM in.

vLLM's CPU attention takes head sizes of 32 and up (it refused tiny/llama3's 16: "Unsupported CPU
attention configuration: head_dim=16"), so the decoder here is a tiny decoder twin (tiny/llama3 by
default, tiny/qwen3) with heads of 64 and fresh random weights, and that twin's tokenizer (tiny/llama3's
speaks Llama 3's template: turns end with <|eot_id|>, not the EOS; tiny/qwen3's ChatML).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from paths import REPO

VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
VLLM_SIDE = Path(__file__).with_name("vllm_side.py")


def vllm_python() -> Path:
    """The plugin's environment; a clear failure when it was never built (make test-all builds it first)."""
    if not VLLM_PYTHON.is_file():
        raise AssertionError(f"{VLLM_PYTHON} is missing: run `make vllm` (vLLM's CPU build and the plugin)")
    return VLLM_PYTHON


def vllm_decoder(out: Path, twin: str = "llama3") -> str:
    """tiny/TWIN with 2 heads of 64 (1 KV head), random weights: a decoder vLLM's CPU attention runs."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from speechlm.model import ids

    src = ids.resolve(f"tiny/{twin}")
    cfg = AutoConfig.from_pretrained(src)
    cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim = 2, 1, 64
    if hasattr(cfg, "linear_key_head_dim"):  # Qwen3.5's Gated DeltaNet: vLLM's CPU kernel takes 128 (the real size)
        cfg.linear_key_head_dim = cfg.linear_value_head_dim = 128
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(out)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)
    return str(out)


def tiny_folder(out: Path, encoder: str = "tiny/whisper", decoder: str = "llama3", bf16: bool = True, **settings):
    """(the SpeechLM speechlm transcribes with, its self-contained folder): the tiny `encoder` twin, the
    decoder above (tiny/`decoder` reshaped) with a LoRA adapter, every trained part away from its init
    (model_helpers), and the model settings `settings` (stop rules, pool stride) written into the folder;
    `bf16=False`: fp32 (bf16 logits of a random twin tie often enough to flip a greedy token).

    The rows of tokens that decode to part of a character are zeroed in the (tied) embeddings, so the
    random model writes whole characters: vLLM's detokenizer holds back an unfinished character at the
    end of a text, where a whole-sequence decode writes U+FFFD."""
    import torch

    from model_helpers import trained_looking
    from speechlm.model import from_pretrained, save_pretrained

    decoder = vllm_decoder(out.parent / f"{out.name}-decoder", decoder)
    live = trained_looking(encoder, decoder, bf16=bf16, model_dtype=None if bf16 else "float32")
    tok = live.tokenizer
    head = live._base_lm().get_output_embeddings().weight
    partial = [i for i in range(head.shape[0]) if "\ufffd" in tok.decode([i])]
    with torch.no_grad():
        head[partial] = 0
    for k, v in settings.items():
        setattr(live.cfg, k, v)
    save_pretrained(live, out, self_contained=True)
    return from_pretrained(out), out


def run_vllm(command: str, folder: Path, payload: dict, timeout: int = 600) -> dict:
    """Run vllm_side.py COMMAND in the plugin's environment, payload in as JSON, its JSON answer out."""
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1", VLLM_LOGGING_LEVEL="WARNING")
    env.pop("PYTHONPATH", None)  # nothing of speechlm's environment: the plugin stands alone
    proc = subprocess.run(
        [str(vllm_python()), str(VLLM_SIDE), command, str(folder)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(folder.parent),
        env=env,
    )
    if proc.returncode != 0:
        raise AssertionError(f"vllm_side.py {command} failed ({proc.returncode}):\n{proc.stderr[-6000:]}")
    mark = "SPEECHLM-VLLM-RESULT "
    lines = [line for line in proc.stdout.splitlines() if line.startswith(mark)]
    if not lines:
        raise AssertionError(f"vllm_side.py {command} gave no result:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1].removeprefix(mark))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def vllm_server(folder: Path, *args: str):
    """`vllm serve FOLDER` on 127.0.0.1 (served name "speechlm", `args` added) until the block ends; its
    URL. The server's log is serve.log beside the folder."""
    port = _free_port()
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1")
    env.pop("PYTHONPATH", None)
    cmd = [str(VLLM_PYTHON.parent / "vllm"), "serve", str(folder), "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--served-model-name", "speechlm", "--max-model-len", "2048", "--enforce-eager", *args]
    log = open(folder.parent / "serve.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 400
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise AssertionError(
                        f"vllm serve did not start: {(folder.parent / 'serve.log').read_text()[-4000:]}"
                    ) from None
                time.sleep(2)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server's own process group (its engine process too)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
