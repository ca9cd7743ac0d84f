"""Byte-deterministic WebDataset tars, the staging area, and the two kinds of worker task.

Stage 1 (`process_chunk`): a worker fetches a chunk of rows, drops the bad ones, and stages the
kept clips' FLAC bytes plus a JSON of their metadata under `.stage/`. Stage 2 (`write_shard`):
once every chunk is staged, the kept clips (already in their shuffled order) are cut into shards
by the recipe's size limits and each shard is written as a tar. Every file is written under a
temporary name and renamed when complete, so a killed build resumes by skipping what exists.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from speechlm import audio
from speechlm.fsutil import atomic_write
from speechlm.shard import hfstream, sources
from speechlm.shard import normalize as N
from speechlm.shard.schema import Source

MAX_ERRORS_KEPT = 3  # named in the log per chunk; the drop report lists every one


def dumps(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()


def tar_member_bytes(size: int) -> int:
    """Bytes one member takes in a tar: a 512-byte header plus the data padded to 512."""
    return 512 + -(-size // 512) * 512


def tar_bytes(members: list[tuple[str, bytes]]) -> bytes:
    """A tar whose bytes depend only on the members: fixed mtime, owner and mode."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


# --------------------------------------------------------------------------- stage 1


def process_chunk(task: dict) -> dict:
    """Fetch, check and FLAC-encode one chunk of rows; stage the kept clips. Returns the metadata."""
    src: Source = task["source"]
    meta_path = Path(task["meta"])
    if meta_path.is_file():  # staged by an earlier (killed) run
        return json.loads(meta_path.read_text())
    blob, clips = [], []
    drops: dict[str, int] = {}
    errors: list[str] = []
    offset = 0
    if task.get("file"):  # a streamed parquet file: this chunk's whole row groups, read once
        cells = hfstream.chunk_cells(task["file"], task["groups"], src.audio_column, task["first"])
        get = lambda ref: hfstream.decode_cell(cells(ref))  # noqa: E731
    else:
        get = lambda ref: sources.of(src).fetch(src, ref)  # noqa: E731
    dropped: list[list] = []  # every dropped row: [orig id, file, reason, detail] (the drop report)
    for cid, oid, text, ref, *stated in task["rows"]:
        try:
            wave, labels = _audio_and_labels(get(ref), stated)
        except audio.AudioError as e:
            reason = N.NOT_FOUND if isinstance(e, audio.AudioNotFound) else N.UNDECODABLE
            drops[reason] = drops.get(reason, 0) + 1
            dropped.append([oid, ref if isinstance(ref, str) else "", reason, str(e)])
            if len(errors) < MAX_ERRORS_KEPT:
                errors.append(f"{oid}: {e}")
            continue
        seconds = len(wave) / audio.SAMPLE_RATE
        reason = N.TOO_SHORT if seconds < task["min_seconds"] else N.TOO_LONG if seconds > task["max_seconds"] else None
        if reason:
            drops[reason] = drops.get(reason, 0) + 1
            dropped.append([oid, ref if isinstance(ref, str) else "", reason, f"{seconds:.2f} s"])
            continue
        flac = audio.encode_flac(wave)
        clip = {
            "id": cid,
            "orig_id": oid,
            "text": text,
            "duration": round(seconds, 6),
            "offset": offset,
            "length": len(flac),
        }
        if labels:
            clip["labels"] = labels
        clips.append(clip)
        blob.append(flac)
        offset += len(flac)
    meta = {"clips": clips, "drops": drops, "errors": errors, "dropped": dropped, "rows": len(task["rows"])}
    atomic_write(Path(task["blob"]), b"".join(blob))
    atomic_write(meta_path, dumps(meta))  # last: its presence marks the chunk complete
    return meta


def _audio_and_labels(got, stated: list) -> tuple:
    """A source's fetch gives audio, or (audio, labels made with it) (SourceType.fetch); the row's
    language and task labels (`stated`: none, or one dict) join them, the kind's own winning."""
    wave, labels = got if isinstance(got, tuple) else (got, None)
    return wave, {**(stated[0] if stated else {}), **(labels or {})}


# --------------------------------------------------------------------------- stage 2


def plan_shards(clips: list[dict], source: str, shard_clips: int, shard_bytes: int) -> list[list[dict]]:
    """Cut clips (in order) into shards closing at `shard_clips` clips or about `shard_bytes` bytes."""
    shards, cur, size = [], [], 0
    for c in clips:
        need = tar_member_bytes(c["length"]) + tar_member_bytes(len(dumps(clip_json(c, source))))
        if cur and ((shard_clips and len(cur) >= shard_clips) or (shard_bytes and size + need + 1024 > shard_bytes)):
            shards.append(cur)
            cur, size = [], 0
        cur.append(c)
        size += need
    if cur:
        shards.append(cur)
    return shards


def clip_json(c: dict, source: str) -> dict:
    """A clip's JSON member: the fixed keys, plus any labels its source made with the audio (which
    can't replace a fixed key)."""
    return {
        **c.get("labels", {}),
        "id": c["id"],
        "text": c["text"],
        "duration": c["duration"],
        "source": source,
        "orig_id": c["orig_id"],
    }


def write_shard(task: dict) -> str:
    path = Path(task["path"])
    if path.is_file():  # written by an earlier (killed) run
        return path.name
    members = []
    handles: dict[str, object] = {}
    try:
        for c in task["clips"]:
            f = handles.get(c["blob"]) or handles.setdefault(c["blob"], open(c["blob"], "rb"))
            f.seek(c["offset"])
            members.append((f"{c['id']}.flac", f.read(c["length"])))
            members.append((f"{c['id']}.json", dumps(clip_json(c, task["source"]))))
    finally:
        for f in handles.values():
            f.close()
    atomic_write(path, tar_bytes(members))
    return path.name
