"""What the server's tests share: the API key the servers under test require, a server started in a
subprocess on 127.0.0.1 (speechlm.serve), and the audio and client helpers the requests use."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import openai
import soundfile as sf

from paths import REPO
from tests.infra.daemons import free_port

KEY = "test-key-7f3a9c"  # what the servers under test require; must never reach their logs
SR = 16000
ERROR_KEYS = {"message", "type", "param", "code"}


def flac(wave: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, wave, SR, format="FLAC")
    return buf.getvalue()


def wav(wave: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, wave, SR, format="WAV")
    return buf.getvalue()


class Server:
    def __init__(self, model: Path, log: Path, *flags: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            "SPEECHLM_API_KEY": KEY,
        }
        cmd = [sys.executable, "-m", "speechlm.serve", str(model), "--port", str(self.port), *flags]
        with open(log, "wb") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        deadline = time.time() + 180
        while True:
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                raise AssertionError(f"server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)

    def health(self) -> dict:
        return httpx.get(self.url + "/health", timeout=5).json()

    def client(self, key: str | None = KEY) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key or "none", max_retries=0, timeout=120)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


LIMITS = ["--max-upload-mb", "3", "--max-seconds", "150"]


def varied_twin(out: Path, seed: int, **model) -> Path:
    """A tiny Granite + Qwen3 twin in fp32 whose transcripts differ from clip to clip (a trained-looking
    adapter, end-of-turn held back: speechlm's export test does the same), saved as a model folder at
    `out`; `model` sets fields of its model config (e.g. languages). fp32, as the demo model: bf16's
    batch-shaped rounding flips near ties (docs/design.md, "Serving")."""
    import torch

    from model_helpers import tiny_config
    from speechlm import text
    from speechlm.model import save_pretrained
    from speechlm.model.build import build_model

    torch.manual_seed(seed)
    cfg = tiny_config(decoder="tiny/qwen3", encoder="tiny/granite_speech5", bf16=False)
    cfg.model.model_dtype = "float32"
    for key, value in model.items():
        setattr(cfg.model, key, value)
    m = build_model(cfg)
    with torch.no_grad():
        for n, p in m.decoder.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
        m._base_lm().get_output_embeddings().weight[text.end_of_turn_id(m.tokenizer)] = 0
    m.cfg.max_new_tokens = 10
    save_pretrained(m, out)
    return out


def transcribe(client: openai.OpenAI, path: Path, fmt: str = "text", **kw):
    with open(path, "rb") as f:
        out = client.audio.transcriptions.create(model="twin", file=f, response_format=fmt, **kw)
    return out if isinstance(out, str) else out.text
