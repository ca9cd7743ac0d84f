"""Corpus WER of a model on a test set (`evaluate`), as `speechlm eval` prints it and training logs it:
every clip transcribed as `speechlm transcribe` would (the long-form cut, sorted batches), scored with
speechlm.scoring.wer; with word times (the CTC head) when the set carries true ones or a word threshold is set.

A noisy or reverberant test condition (`condition`) is an eval option, never a training setting: noise
mixed in at exactly X dB SNR (generated coloured noise, or clips from a folder) and/or a synthetic room
(RT60 0.3-0.7 s, DRR 0-5 dB), through speechlm.data.augment with draws fixed by the clip id, so every
model hears the same corrupted clips.
"""

from __future__ import annotations

import sys
import time

from speechlm import audio
from speechlm.config import ConfigError
from speechlm.config.augment import AugmentConfig, NoiseAugment, ReverbAugment, SpeedAugment
from speechlm.data.augment import Augmenter, list_audio
from speechlm.inference import by_language
from speechlm.inference.datasets import dataset_clips
from speechlm.inference.transcribe import MAX_SECONDS, load_clip, transcribe_timed, transcribe_waves
from speechlm.model.longform.settings import DEFAULT_LONG_FORM, LongForm
from speechlm.scoring import languages, wer
from speechlm.scoring.boundaries import score_boundaries

CHUNK_CLIPS = 512  # clips decoded and sorted by length at a time: bounded memory, little padding


def _chunks(it, n: int | None, size: int):
    chunk = []
    for k, item in enumerate(it):
        if n is not None and k >= n:
            break
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def condition(noise_snr_db: float | None = None, noise_dir: str | None = None, reverb: bool = False):
    """(name suffix, Augmenter or None) for a corrupted test condition; the same draws for every run."""
    if noise_snr_db is None and not reverb:
        return "", None
    cfg = AugmentConfig(enabled=True, speed=SpeedAugment([1.0], prob=0.0))
    suffix = ""
    if reverb:
        cfg.reverb = ReverbAugment(prob=1.0, rt60_s=[0.3, 0.7], drr_db=[0.0, 5.0])
        suffix += "+reverb"
    if noise_snr_db is not None:
        cfg.noise = NoiseAugment(prob=1.0, snr_db=[noise_snr_db, noise_snr_db], dir=noise_dir)
        suffix += f"+noise{noise_snr_db:g}dB"
    if noise_dir is not None:
        list_audio(noise_dir, "--noise-dir")  # a missing or empty folder: a ConfigError naming the flag
    return suffix, Augmenter(cfg, seed=0)


def evaluate(
    model,
    spec: str,
    n: int | None = None,
    batch_size: int = 16,
    split: str | None = None,
    max_seconds: float | None = MAX_SECONDS,
    long_form: LongForm = DEFAULT_LONG_FORM,
    corrupt=None,
    suffix: str = "",
    word_threshold: float | None = None,
    drop_unsupported: bool = False,
) -> dict:
    """Corpus WER of `model` on a dataset. Clips are decoded CHUNK_CLIPS at a time, sorted by length and
    batched (`transcribe_waves`); clips longer than the model's window are cut as `long_form` says; a clip
    that can't be decoded or is over `max_seconds` is skipped, logged and counted. `corrupt` (from
    `condition`): an Augmenter applied to every clip (epoch 0, the clip's id), `suffix` its name.
    Word timestamps are made (`transcribe_timed`) when the references carry true times (their boundary
    error is reported) or `word_threshold` is set: the share of generated words whose CTC support is
    below it is counted (the hallucination signal), and `drop_unsupported` leaves those words out."""
    name, clips = dataset_clips(spec, split, n, batch_size)
    rows, skipped, audio_seconds = [], 0, 0.0
    stops = {"capped": 0, "loops_truncated": 0}
    t0 = time.perf_counter()
    for chunk in _chunks(clips, n, CHUNK_CLIPS):
        waves, keep, bad, seconds = _loaded(chunk, max_seconds, corrupt)
        skipped, audio_seconds = skipped + bad, audio_seconds + seconds
        if waves:
            run = (long_form, batch_size, stops, word_threshold, drop_unsupported)
            rows += _transcribe_chunk(model, waves, keep, clips, *run)
    if not rows:
        raise ConfigError(f"dataset '{spec}' gave no clips to evaluate")
    result = {"dataset": name + suffix, **wer.score([r["reference"] for r in rows], [r["hypothesis"] for r in rows])}
    if any("task" in r for r in rows):  # clips that state a language or task: scores per language and task
        result["languages"] = languages.score_rows(languages.mark_answer_languages(rows))
    result["skipped"] = skipped + getattr(clips, "skipped", 0)
    # how often generation was stopped by the clip's token budget or by the loop rule, not by end-of-turn
    result.update(stops)
    result.update(timing_summary(rows, word_threshold))
    result["seconds"] = round(time.perf_counter() - t0, 2)
    result["audio_seconds"] = round(audio_seconds, 2)
    result["rtfx"] = round(audio_seconds / max(result["seconds"], 1e-9), 2)  # audio seconds per wall second
    for r in rows:
        r["errors"] = wer.clip_errors(r["reference"], r["hypothesis"])
    result["worst"] = sorted(rows, key=lambda r: -r["errors"])[:5]
    result["rows"] = rows
    return result


def _loaded(chunk, max_seconds: float | None, corrupt) -> tuple[list, list, int, float]:
    """(waves, their (id, reference), clips skipped, seconds of audio as recorded) of a chunk: a clip that
    can't be decoded or is too long is skipped and said on stderr; `corrupt` (an eval condition) is
    applied to each clip kept."""
    waves, keep, skipped, seconds = [], [], 0, 0.0
    for cid, src, ref in chunk:
        try:
            wave = load_clip(src, cid, max_seconds)
        except ConfigError as e:
            skipped += 1
            print(f"skip {e}", file=sys.stderr)
            continue
        waves.append(wave if corrupt is None else corrupt(wave, 0, str(cid)))
        keep.append((cid, ref))
        seconds += len(wave) / audio.SAMPLE_RATE
    return waves, keep, skipped, seconds


def _transcribe_chunk(model, waves, keep, clips, long_form, batch_size, stops, threshold, drop) -> list[dict]:
    """The rows of one chunk of decoded clips; with word times when the set has true ones or a threshold is
    set. Clips whose set states their language and task are asked them (speechlm.inference.by_language)
    and scored against their task's answer; given none, the model's detected language is recorded too."""
    truth, labels = getattr(clips, "words", {}), getattr(clips, "labels", {})
    mine = [labels.get(c) for c, _ in keep]
    asked = [by_language.asked(model, lab) for lab in mine]
    timed = threshold is not None or bool(truth)
    fn = transcribe_timed if timed else transcribe_waves
    outs = by_language.run_by_task(lambda ws, t: fn(model, ws, batch_size, long_form, stops, task=t), waves, asked)
    rows = []
    for (c, ref), out, lab, task in zip(keep, outs, mine, asked):
        ref = by_language.reference(lab, ref)
        row = (
            timed_row(c, ref, out, truth.get(c), threshold, drop)
            if timed
            else {"id": c, "reference": ref, "hypothesis": out}
        )
        rows.append({**row, **by_language.row_labels(lab, task)})
    spoken = [i for i, r in enumerate(rows) if r.get("language") and r["task"] == "transcribe"]
    found = by_language.detect_languages(model, [waves[i] for i in spoken], batch_size, long_form)
    for i, lang in zip(spoken, found):
        if lang is not None:
            rows[i]["detected"] = lang
    return rows


def timed_row(cid, ref: str, timed: dict, truth, threshold: float | None, drop: bool) -> dict:
    """One clip's row with word times: its words, the share the CTC head does not support, and the
    boundary errors against `truth` (true word times) when the set has them."""
    words = timed["words"]
    row = {"id": cid, "reference": ref, "hypothesis": timed["text"], "words": words}
    if threshold is not None:
        row["unsupported"] = sum(w["confidence"] < threshold for w in words)
        if drop:
            row["hypothesis"] = " ".join(w["text"] for w in words if w["confidence"] >= threshold)
    if truth:
        row["boundaries"] = score_boundaries(truth, words)
    return row


def timing_summary(rows: list[dict], threshold: float | None) -> dict:
    """The hallucination signal's counts and the boundary errors, summed over clips."""
    out = {}
    if threshold is not None:
        words = sum(len(r.get("words", [])) for r in rows)
        flagged = sum(r.get("unsupported", 0) for r in rows)
        out["unsupported_words"] = {"threshold": threshold, "flagged": flagged, "words": words}
    scored = [r.pop("boundaries") for r in rows if "boundaries" in r]
    if scored:
        out["boundaries"] = sum(scored[1:], scored[0]).summary()
    return out
