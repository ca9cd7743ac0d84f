#!/usr/bin/env python
"""The server against bad inputs and hostile clients (issue 36's goals): `python -m speechlm.serve`
started on 127.0.0.1 (bench/serve_load.py's Server), its memory sampled all along.

    PYTHONPATH=. HF_HUB_OFFLINE=1 python bench/serve_hostile.py -m outputs/demo/final [-d demo]
        [--rounds 500] [--stalled 64] [--bombs 16] [--code DIR] [--json out.json] [--time-limit 1800]

1. Unloaded: the resident memory of the idle server, and a ~2 s clip's latency alone (median of 5).
2. Poisoned batch: 8 good clips and one WAV of 5 samples sent together, 3 rounds: how many good ones
   got their text (`--code DIR` runs the server from another checkout, e.g. main before the fix).
3. The disconnect race: 16 requests together; when the first answer arrives the other 15 hang up;
   `--rounds` times (bounded by the time limit).
4. Stalled uploads: `--stalled` sockets send headers and 8 bytes, then nothing; a good request meanwhile;
   then how long until each stalled one is answered (408 after --read-timeout).
5. Header bombs: `--bombs` at once, half 40 KB WAVs whose header says 1 Hz (20,000 s), half 1 s FLACs
   whose header says 4000 s (over the default --max-seconds 3600).
6. Afterwards: the clip's latency again (goal: within 2x of step 1), the peak memory over the whole run
   (goal: under 2x idle), and whether the model worker is alive.
"""

from __future__ import annotations

import argparse
import io
import json
import selectors
import socket
import struct
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_load import SR, Client, Server, flac, wav  # noqa: E402


class Memory:
    """The server process's resident memory, sampled every 50 ms in a thread."""

    def __init__(self, pid: int):
        import psutil

        self.proc, self.peak, self.samples = psutil.Process(pid), 0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                rss = self.proc.memory_info().rss
            except Exception:  # noqa: BLE001 -- the process is gone
                return
            self.peak = max(self.peak, rss)
            self.samples.append(rss)
            time.sleep(0.05)

    def now(self) -> int:
        return self.proc.memory_info().rss

    def stop(self):
        self._stop.set()


def raw_request(port: int, data: bytes, name: str = "a.flac") -> socket.socket:
    import httpx

    req = httpx.Request(
        "POST",
        f"http://127.0.0.1:{port}/v1/audio/transcriptions",
        files={"file": (name, data)},
        data={"model": "bench"},
    )
    body = req.read()
    head = "POST /v1/audio/transcriptions HTTP/1.1\r\nhost: 127.0.0.1\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in req.headers.items() if k.lower() != "host"
    )
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(head.encode() + b"\r\n" + body)
    return sock


def latency(client: Client, clip: bytes, ref: str, n: int = 5) -> dict:
    runs = [client.transcribe(clip) for _ in range(n)]
    return {
        "median_s": round(float(np.median([dt for _, dt, _ in runs])), 3),
        "same_text": all(t == ref for t, _, _ in runs),
    }


def poisoned(client: Client, clips: list[bytes], refs: list[str], rounds: int = 3) -> dict:
    tiny = wav(np.full(5, 0.1, np.float32))
    out = {"rounds": rounds, "good_sent": 0, "good_with_text": 0, "good_failed": 0, "tiny_statuses": []}
    for _ in range(rounds):
        with ThreadPoolExecutor(9) as pool:
            good = [pool.submit(client.transcribe, c) for c in clips[:8]]
            bad = pool.submit(client.transcribe, tiny)
            results = [g.result() for g in good]
        out["good_sent"] += len(results)
        out["good_with_text"] += sum(t == r for (t, _, _), r in zip(results, refs))
        out["good_failed"] += sum(s != 200 for _, _, s in results)
        out["tiny_statuses"].append(bad.result()[2])
    print(json.dumps({"poisoned batch": out}), flush=True)
    return out


def race(port: int, clips: list[bytes], rounds: int, deadline: float) -> dict:
    done = 0
    while done < rounds and time.time() < deadline:
        socks = [raw_request(port, clips[i % len(clips)]) for i in range(16)]
        sel = selectors.DefaultSelector()
        for s in socks:
            sel.register(s, selectors.EVENT_READ)
        sel.select(timeout=120)
        sel.close()
        for s in socks:
            s.close()
        done += 1
    out = {"rounds": done}
    print(json.dumps({"disconnect race": out}), flush=True)
    return out


def stall(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(
        b"POST /v1/audio/transcriptions HTTP/1.1\r\nhost: x\r\ncontent-type: multipart/form-data; boundary=abc\r\n"
        b"content-length: 100000\r\n\r\n--abc\r\n"
    )
    return sock


def stalled(port: int, n: int, client: Client, clip: bytes, ref: str) -> dict:
    socks = [stall(port) for _ in range(n)]
    time.sleep(0.5)
    text, dt, status = client.transcribe(clip)
    t0 = time.perf_counter()
    answered = []
    for s in socks:
        s.settimeout(120)
        try:
            head = s.recv(64)
        except TimeoutError:
            head = b""
        answered.append((head[:12].decode(errors="replace"), time.perf_counter() - t0))
        s.close()
    out = {
        "stalled": n,
        "good_request_meanwhile": {"status": status, "same_text": text == ref, "latency_s": round(dt, 3)},
        "stalled_answers": sorted({a for a, _ in answered}),
        "all_answered_within_s": round(max(t for _, t in answered), 2),
    }
    print(json.dumps({"stalled uploads": out}), flush=True)
    return out


def wav_header(rate: int, channels: int, frames: int) -> bytes:
    block = channels * 2
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * block, block, 16)
    size = frames * block
    return (
        b"RIFF"
        + struct.pack("<I", 36 + size)
        + b"WAVEfmt "
        + struct.pack("<I", 16)
        + fmt
        + b"data"
        + struct.pack("<I", size)
    )


def flac_claiming(seconds: float, rate: int = 8000) -> bytes:
    """One second of FLAC silence whose STREAMINFO says `seconds` (a header that lies)."""
    buf = io.BytesIO()
    sf.write(buf, np.zeros(rate, np.int16), rate, format="FLAC", subtype="PCM_16")
    d = bytearray(buf.getvalue())
    field = int.from_bytes(d[18:26], "big") & ~((1 << 36) - 1)  # STREAMINFO bytes 10..17: low 36 bits
    d[18:26] = (field | int(seconds * rate)).to_bytes(8, "big")
    return bytes(d)


def bombs(client: Client, n: int) -> dict:
    """Half 40 KB WAVs whose header says 1 Hz (20,000 s), half 1 s FLACs whose header says 4000 s."""
    one_hz = wav_header(1, 1, 20_000) + bytes(40_000)
    files = [one_hz if i % 2 == 0 else flac_claiming(4000) for i in range(n)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(client.transcribe, files))
    out = {
        "bombs": n,
        "sizes_kb": sorted({round(len(f) / 1024) for f in files}),
        "statuses": sorted({s for _, _, s in results}),
        "wall_s": round(time.perf_counter() - t0, 2),
    }
    print(json.dumps({"header bombs": out}), flush=True)
    return out


def run(args, clips: list[bytes], refs: list[str], short: int) -> dict:
    log = Path(tempfile.mkdtemp(prefix="serve-hostile-")) / "server.log"
    extra = [*(["--read-timeout", str(args.read_timeout)] if args.read_timeout else []), *args.server_args.split()]
    server = Server(args.model, extra, log)
    mem = Memory(server.proc.pid)
    start = time.time()
    result = {"model": args.model, "code": args.code or "this checkout", "server_log": str(log)}
    try:
        client = Client(server.url, 300)
        client.transcribe(clips[short])  # warm-up
        time.sleep(1)
        idle = mem.now()
        result["idle_rss_mb"] = round(idle / 2**20)
        result["unloaded"] = latency(client, clips[short], refs[short])
        result["poisoned_batch"] = poisoned(client, clips, refs)
        if not args.poison_only:
            deadline = start + args.time_limit
            if args.rounds:
                result["race"] = race(server.port, clips, args.rounds, deadline)
            result["stalled"] = stalled(server.port, args.stalled, client, clips[short], refs[short])
            result["bombs"] = bombs(client, args.bombs)
            result["afterwards"] = latency(client, clips[short], refs[short])
            h = server.health()
            result["afterwards"].update(
                worker_alive=h["batcher"].get("alive", True),
                status=h["status"],
                same_process=server.proc.poll() is None,
            )
            result["afterwards"]["latency_ratio"] = round(
                result["afterwards"]["median_s"] / result["unloaded"]["median_s"], 2
            )
        result["peak_rss_mb"] = round(mem.peak / 2**20)
        result["peak_over_idle"] = round(mem.peak / idle, 2)
    finally:
        mem.stop()
        server.stop()
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-d", "--dataset", default="demo", help="shard set or data recipe (its test split)")
    ap.add_argument("--rounds", type=int, default=500)
    ap.add_argument("--stalled", type=int, default=64)
    ap.add_argument("--bombs", type=int, default=16)
    ap.add_argument("--read-timeout", type=float, default=10.0)
    ap.add_argument("--server-args", default="")
    ap.add_argument("--code", default=None, help="run the server from this checkout instead (e.g. main before a fix)")
    ap.add_argument("--poison-only", action="store_true", help="only steps 1-2 (an old server has no --read-timeout)")
    ap.add_argument("--time-limit", type=float, default=1800.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.code:  # serve_load's Server runs `python -m speechlm.serve` from its REPO: the other checkout
        import serve_load

        serve_load.REPO = Path(args.code).resolve()
    if args.poison_only:
        args.read_timeout = None

    from speechlm.inference import dataset_clips, load_model, transcribe_waves

    _, data = dataset_clips(args.dataset, "test", 16)
    waves = [np.asarray(w, np.float32) for _, (_, w, ref) in zip(range(16), data) if ref][:8]
    model = load_model(args.model)
    refs = transcribe_waves(model, waves)
    del model
    short = int(np.argmin([abs(len(w) / SR - 2.0) for w in waves]))
    clips = [flac(w) for w in waves]
    result = run(args, clips, refs, short)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
