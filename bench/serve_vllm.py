"""`vllm serve MODEL_FOLDER` (the speechlm plugin, .venv-vllm: `make vllm`) as bench/serve_load.py's
second server: started on 127.0.0.1, its start-up timed, stopped with its engine process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VLLM = REPO / ".venv-vllm" / "bin" / "vllm"


class VllmServer:
    """The same face as serve_load.Server: url, proc, health(), busy(), stop(), started_s."""

    def __init__(self, model: str, extra: list[str], log: Path, kv_cache_gib: int = 2):
        if not VLLM.is_file():
            raise SystemExit(f"{VLLM} is missing: run `make vllm`")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [str(VLLM), "serve", str(Path(model).resolve()), "--host", "127.0.0.1", "--port", str(self.port)]
        cmd += ["--served-model-name", "bench", *extra]
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), "HF_HUB_OFFLINE": "1"}
        env.pop("PYTHONPATH", None)  # the plugin's environment only
        self.log = log
        t0 = time.perf_counter()
        with open(log, "wb") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        import httpx

        deadline = time.time() + 900
        while True:
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                raise SystemExit(f"vllm serve did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        self.started_s = round(time.perf_counter() - t0, 1)

    def health(self) -> dict:
        return {"running": self.running()}

    def running(self) -> float:
        """vLLM's own gauge of the requests in its running batch (/metrics)."""
        import httpx

        for line in httpx.get(self.url + "/metrics", timeout=10).text.splitlines():
            if line.startswith("vllm:num_requests_running"):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def busy(self) -> bool:
        return self.running() > 0

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # its own process group: the engine process goes too
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
