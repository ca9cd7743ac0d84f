#!/usr/bin/env python
"""The server under load (issue 32's goals): `python -m speechlm.serve` started on 127.0.0.1, spoken to
with the official `openai` client.

    PYTHONPATH=. HF_HUB_OFFLINE=1 python bench/serve_load.py -m outputs/demo [-d shards/demo] [--clips 64]
        [--clients 16] [--long-seconds 180] [--soak 500] [--server-args "--max-batch 16 --max-wait-ms 10"]
        [--backend speechlm|vllm|both] [--vllm-args "--max-model-len 1024"] [--json out.json] [--time-limit 1800]
        [--phases throughput,short,soak]

`--backend vllm` runs the same phases against `vllm serve MODEL_FOLDER` (the speechlm plugin in .venv-vllm,
bench/serve_vllm.py), `both` runs the two servers one after the other on the same clips and references
(side by side, each with the machine to itself), and each server's start-up time is reported. The soak's
bad inputs expect speechlm's statuses: it runs against speechlm's server only.

1. Throughput: the test split's clips sent one at a time, then by `--clients` concurrent clients
   (each clip once): audio seconds per wall second, p50 and p95 latency, and whether every text is
   `speechlm transcribe`'s (`transcribe_waves` in this process, before the server starts).
2. Short requests stay short: a ~2 s clip's latency alone, then while a `--long-seconds` recording
   (the clips with pauses between them) is being transcribed; the ratio of the two.
3. Soak: `--soak` requests, `--clients` at a time, a third of them bad inputs (not audio, empty,
   zero samples, unknown model, missing file, unsupported response_format, a truncated upload, too
   large, a clip of 5 samples, a WAV cut 16 bytes into its data): every good one must get speechlm's
   text, every bad one its 4xx (the tiny clips: 400, or 200 where the model pads them); 5xx and connection
   errors are counted, and the server must still be the same process at the end.
Bounded: every phase has a request count, every request a timeout, the whole run `--time-limit`.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import soundfile as sf

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
SR = 16000
PHASES = {"throughput", "short", "soak"}
UPLOAD_MB = 8  # the bench's server limit: the long recording fits, the "too large" input does not


def flac(wave: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, wave, SR, format="FLAC")
    return buf.getvalue()


def wav(wave: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, wave, SR, format="WAV")
    return buf.getvalue()


def recording(waves: list[np.ndarray], seconds: float, seed: int = 0) -> np.ndarray:
    """Clips one after another with 0.8-1.5 s pauses, repeated until `seconds` of audio."""
    rng = np.random.default_rng(seed)
    parts, total = [], 0
    while total < seconds * SR:
        for w in waves:
            gap = np.zeros(int(SR * rng.uniform(0.8, 1.5)), np.float32)
            parts += [w, gap]
            total += len(w) + len(gap)
            if total >= seconds * SR:
                break
    return np.concatenate(parts)


def percentile(xs: list[float], q: float) -> float:
    return round(float(np.percentile(xs, q)), 3) if xs else float("nan")


class Server:
    def __init__(self, model: str, extra: list[str], log: Path):
        t0 = time.perf_counter()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "speechlm.serve", model, "--host", "127.0.0.1", "--port", str(self.port)]
        cmd += ["--max-upload-mb", str(UPLOAD_MB), "--served-model-name", "bench", *extra]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        env.pop("SPEECHLM_API_KEY", None)
        self.log = log
        with open(log, "wb") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        import httpx

        deadline = time.time() + 600
        while True:
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                raise SystemExit(f"the server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        self.started_s = round(time.perf_counter() - t0, 1)

    def health(self) -> dict:
        import httpx

        return httpx.get(self.url + "/health", timeout=10).json()

    def busy(self) -> bool:
        return self.health()["batcher"]["segments_waiting"] > 0

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def bad_inputs() -> list[tuple[str, dict, tuple[int, ...]]]:
    """(name, httpx.post keyword arguments, the statuses it may get). A clip shorter than one hop (issue
    36: it failed every request in its batch) may be padded and transcribed (200) or refused (400); it
    goes into batches with the good requests."""
    one_s = wav(np.zeros(SR, np.float32))
    tiny, cut = wav(np.full(5, 0.1, np.float32)), wav(np.full(SR, 0.1, np.float32))[:60]
    import httpx

    req = httpx.Request("POST", "http://x/", files={"file": ("a.wav", one_s)}, data={"model": "bench"})
    body = req.read()[:-100]
    truncated = {"content": body, "headers": {"content-type": req.headers["content-type"]}}
    return [
        ("not audio", {"files": {"file": ("a.txt", b"not audio at all")}, "data": {"model": "bench"}}, (400,)),
        ("empty file", {"files": {"file": ("a.wav", b"")}, "data": {"model": "bench"}}, (400,)),
        (
            "zero samples",
            {"files": {"file": ("a.wav", wav(np.zeros(0, np.float32)))}, "data": {"model": "bench"}},
            (400,),
        ),
        ("unknown model", {"files": {"file": ("a.wav", one_s)}, "data": {"model": "whisper-1"}}, (404,)),
        ("missing file", {"data": {"model": "bench"}}, (400,)),
        (
            "bad response_format",
            {"files": {"file": ("a.wav", one_s)}, "data": {"model": "bench", "response_format": "xml"}},
            (400,),
        ),
        ("truncated upload", truncated, (400,)),
        (
            "too large",
            {"files": {"file": ("a.wav", b"\0" * ((UPLOAD_MB + 1) * 2**20))}, "data": {"model": "bench"}},
            (413,),
        ),
        ("tiny clip (5 samples)", {"files": {"file": ("a.wav", tiny)}, "data": {"model": "bench"}}, (200, 400)),
        ("WAV cut 16 bytes into its data", {"files": {"file": ("a.wav", cut)}, "data": {"model": "bench"}}, (200, 400)),
    ]


class Client:
    """The openai client for good requests, httpx for bad ones; every request timed."""

    def __init__(self, url: str, timeout: float, response_format: str = "text"):
        import httpx
        import openai

        self.url = url
        # vLLM answers response_format "text" with its JSON body: its client asks for json and reads .text
        self.response_format = response_format
        self.openai = openai
        self.ai = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=timeout)
        self.http = httpx.Client(timeout=timeout)

    def transcribe(self, data: bytes) -> tuple[str | None, float, int]:
        """(text or None, seconds, status)."""
        t = time.perf_counter()
        try:
            text = self.ai.audio.transcriptions.create(
                model="bench", file=("a.flac", data), response_format=self.response_format
            )
            return (text if isinstance(text, str) else text.text), time.perf_counter() - t, 200
        except self.openai.APIStatusError as e:
            return None, time.perf_counter() - t, e.status_code
        except self.openai.APIConnectionError:
            return None, time.perf_counter() - t, 0

    def bad(self, kwargs: dict) -> int:
        import httpx

        try:
            return self.http.post(self.url + "/v1/audio/transcriptions", **kwargs).status_code
        except httpx.TransportError:
            return 0


def throughput(client: Client, clips: list[bytes], refs: list[str], seconds: list[float], n_clients: int) -> dict:
    def run(i):
        text, dt, status = client.transcribe(clips[i])
        return text == refs[i], dt, status

    out = {}
    for name, workers in (("one at a time", 1), (f"{n_clients} concurrent clients", n_clients)):
        t0 = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(run, range(len(clips))))
        wall = time.perf_counter() - t0
        lat = [dt for _, dt, _ in results]
        out[name] = {
            "requests": len(clips),
            "audio_s": round(sum(seconds), 1),
            "wall_s": round(wall, 2),
            "audio_s_per_wall_s": round(sum(seconds) / wall, 2),
            "p50_s": percentile(lat, 50),
            "p95_s": percentile(lat, 95),
            "same_text_as_transcribe": sum(ok for ok, _, _ in results),
            "errors": sum(status != 200 for _, _, status in results),
        }
        print(json.dumps({name: out[name]}), flush=True)
    seq, conc = out.values()
    out["speed-up"] = round(conc["audio_s_per_wall_s"] / seq["audio_s_per_wall_s"], 2)
    return out


def short_behind_long(
    server: Server, client: Client, short: bytes, short_ref: str, long: bytes, long_ref: str, tries: int = 3
):
    # each try times the clip alone right before it times it behind the recording: on a machine shared
    # with other jobs the load drifts, and a ratio of two phases minutes apart would measure the drift
    alone, loaded, long_runs = [], [], []
    for _ in range(tries):
        text, dt, _ = client.transcribe(short)
        alone.append(dt)
        box = {}
        t = threading.Thread(target=lambda box=box: box.update(r=client.transcribe(long)))
        t.start()
        deadline = time.time() + 120
        while not server.busy() and t.is_alive() and time.time() < deadline:
            time.sleep(0.01)
        text, dt, _ = client.transcribe(short)
        still_busy = t.is_alive()
        t.join()
        loaded.append({"latency_s": round(dt, 3), "same_text": text == short_ref, "long_still_running": still_busy})
        long_runs.append({"latency_s": round(box["r"][1], 2), "same_text": box["r"][0] == long_ref})
    med_alone = float(np.median(alone))
    med_loaded = float(np.median([x["latency_s"] for x in loaded]))
    out = {
        "short_alone_s": [round(x, 3) for x in alone],
        "short_while_long_s": loaded,
        "long_request_s": long_runs,
        "ratio_median": round(med_loaded / med_alone, 2),
        "ratio_per_try": [round(x["latency_s"] / a, 2) for x, a in zip(loaded, alone)],
    }
    print(json.dumps({"short behind long": out}), flush=True)
    return out


def soak(client: Client, clips: list[bytes], refs: list[str], n: int, n_clients: int, deadline: float) -> dict:
    bad = bad_inputs()
    plan = [("bad", bad[(i // 3) % len(bad)]) if i % 3 == 2 else ("good", i % len(clips)) for i in range(n)]
    counts = {"good": 0, "good_same_text": 0, "bad": 0, "bad_expected_status": 0, "5xx": 0, "connection_errors": 0}
    unexpected: list[str] = []
    lock = threading.Lock()

    def run(item):
        if time.time() > deadline:
            return
        kind, what = item
        if kind == "good":
            text, _, status = client.transcribe(clips[what])
            ok = text == refs[what]
        else:
            status = client.bad(what[1])
            ok = status in what[2]
        with lock:
            counts[kind] += 1
            counts[f"{kind}_same_text" if kind == "good" else "bad_expected_status"] += ok
            counts["5xx"] += status >= 500
            counts["connection_errors"] += status == 0
            if not ok and len(unexpected) < 10:
                unexpected.append(f"{kind} {what if kind == 'good' else what[0]}: {status}")

    with ThreadPoolExecutor(n_clients) as pool:
        list(pool.map(run, plan))
    counts["not_sent_time_limit"] = n - counts["good"] - counts["bad"]
    counts["unexpected"] = unexpected
    print(json.dumps({"soak": counts}), flush=True)
    return counts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-d", "--dataset", default="demo", help="shard set or data recipe (its test split)")
    ap.add_argument("--clips", type=int, default=64)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--long-seconds", type=float, default=180.0)
    ap.add_argument("--soak", type=int, default=500)
    ap.add_argument("--server-args", default="", help="more flags for python -m speechlm.serve")
    ap.add_argument("--backend", choices=("speechlm", "vllm", "both"), default="speechlm")
    ap.add_argument("--vllm-args", default="--max-model-len 1024", help="more flags for vllm serve")
    ap.add_argument("--timeout", type=float, default=300.0, help="per request")
    ap.add_argument("--time-limit", type=float, default=1800.0, help="the whole run")
    ap.add_argument("--json", default=None)
    ap.add_argument("--short-tries", type=int, default=3, help="short-behind-long tries (each: alone, then loaded)")
    ap.add_argument("--phases", default="throughput,short,soak", help="which of throughput,short,soak to run")
    args = ap.parse_args(argv)
    args.phases = set(args.phases.split(","))
    if args.phases - PHASES:
        ap.error(f"--phases: unknown {sorted(args.phases - PHASES)}; choose from {sorted(PHASES)}")
    start = time.time()

    from speechlm.inference import dataset_clips, load_model, transcribe_waves

    _, data = dataset_clips(args.dataset, "test", args.clips)
    kept = [(np.asarray(w, np.float32), ref) for _, (_, w, ref) in zip(range(args.clips), data) if ref]
    waves = [w for w, _ in kept]
    long_wave = recording(waves, args.long_seconds)
    short_i = int(np.argmin([abs(len(w) / SR - 2.0) for w in waves]))
    # `speechlm transcribe`'s texts, in this process, before the server takes the cores
    model = load_model(args.model)
    refs = transcribe_waves(model, [*waves, long_wave])
    del model
    clips = [flac(w) for w in waves]
    seconds = [len(w) / SR for w in waves]
    print(
        f"{len(clips)} clips, {sum(seconds):.0f} s; short clip {seconds[short_i]:.2f} s; "
        f"long recording {len(long_wave) / SR:.0f} s",
        flush=True,
    )

    results = {}
    for backend in ("speechlm", "vllm") if args.backend == "both" else (args.backend,):
        results[backend] = run_server(backend, args, clips, refs, seconds, short_i, flac(long_wave), start)
    result = results[args.backend] if args.backend != "both" else results
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


def run_server(backend: str, args, clips, refs, seconds, short_i, long_flac, start) -> dict:
    """One server's phases: start-up, throughput, short behind long, and (speechlm's) the soak."""
    log = Path(tempfile.mkdtemp(prefix=f"serve-bench-{backend}-")) / "server.log"
    if backend == "vllm":
        from serve_vllm import VllmServer

        server = VllmServer(args.model, shlex.split(args.vllm_args), log)
    else:
        server = Server(args.model, shlex.split(args.server_args), log)
    print(f"{backend}: up in {server.started_s} s (log {log})", flush=True)
    pid = server.proc.pid
    try:
        client = Client(server.url, args.timeout, "json" if backend == "vllm" else "text")
        client.transcribe(clips[0])  # warm-up
        result = {"backend": backend, "model": args.model, "clips": len(clips), "startup_s": server.started_s}
        result["server_args"] = args.vllm_args if backend == "vllm" else args.server_args
        if "throughput" in args.phases:
            result["throughput"] = throughput(client, clips, refs[: len(clips)], seconds, args.clients)
        if "short" in args.phases:
            result["short_behind_long"] = short_behind_long(
                server, client, clips[short_i], refs[short_i], long_flac, refs[-1], args.short_tries
            )
        if backend == "speechlm" and "soak" in args.phases:
            result["soak"] = soak(client, clips, refs, args.soak, args.clients, start + args.time_limit)
        h = server.health()
        result["server_after"] = {"same_process": server.proc.poll() is None and server.proc.pid == pid, **h}
    finally:
        server.stop()
    print(f"server log: {log}")
    return result


if __name__ == "__main__":
    main()
