"""Inference: what `speechlm transcribe`, `speechlm eval`, the server, in-training WER and bench/ call.

    model = load_model("outputs/RUN")                     # a model folder, checkpoint, run dir or Hub id
    transcribe_files(model, ["talk.flac"])                # texts of files of any length
    transcribe_waves(model, waves, long_form=LongForm(strategy="pause"))
    transcribe_timed(model, waves)                        # + segments and word times (the CTC head)
    evaluate(model, "shards/demo", n=200)                 # corpus WER, worst clips, rows
    stream = Streamer(model, StreamSettings())            # live: stream.feed(piece) -> committed text
    transcribe_live(model, sys.stdin.buffer)              # live from raw s16le 16 kHz PCM: its events

Modules: transcribe.py (a model's transcripts, the long-form cut of speechlm.model.longform around the
model's batches); live.py (raw PCM from a pipe into a live `Streamer`); args.py (the CLIs' long-form
flags -> `LongForm`); bases.py (`--base PART=PATH`, and the local bases a checkpoint's run trained on);
load.py (`-m MODEL` -> a model); datasets.py and evaluation.py
(test sets, WER, word-time scores). The long-form and live (`Streamer`) modules are numpy only and live in
speechlm.model.longform, since every model folder carries them; their names are here for every caller.

load.py, datasets.py and evaluation.py pull in the model stack and the data reader (torch,
transformers): they are imported when one of their names is first used, so a CLI parses and checks
its arguments (and `--help` answers) before that.
"""

from __future__ import annotations

from speechlm.inference.args import add_long_form_args, check_max_seconds, long_form_from_args
from speechlm.inference.bases import add_base_args, bases_from_args, run_bases
from speechlm.inference.by_language import fitted, served
from speechlm.inference.live import pcm_pieces, transcribe_live
from speechlm.inference.transcribe import (
    MAX_SECONDS,
    Task,
    batch_transcriber,
    clip_spans,
    load_clip,
    long_form_for,
    transcribe_detected,
    transcribe_files,
    transcribe_timed,
    transcribe_waves,
)
from speechlm.model.longform.settings import DEFAULT_LONG_FORM, SAMPLE_RATE, STRATEGIES, WINDOW_SECONDS, LongForm
from speechlm.model.longform.stitch import timed_clip
from speechlm.model.longform.streaming import (
    DEFAULT_STREAM_SETTINGS,
    Streamer,
    StreamEvent,
    StreamSettings,
    feed_many,
    stream_wave,
)

# names of the modules that need the model stack, imported on first use (see above)
_HEAVY = {
    "load_model": "load",
    "local_model": "load",
    "resolve_model_dir": "load",
    "dataset_clips": "datasets",
    "evaluate": "evaluation",
    "condition": "evaluation",
}


def __getattr__(name: str):
    if name not in _HEAVY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from speechlm.inference import datasets, evaluation, load  # torch, transformers: on first use, see above

    return getattr({"load": load, "datasets": datasets, "evaluation": evaluation}[_HEAVY[name]], name)


__all__ = [
    "DEFAULT_LONG_FORM",
    "DEFAULT_STREAM_SETTINGS",
    "MAX_SECONDS",
    "SAMPLE_RATE",
    "STRATEGIES",
    "WINDOW_SECONDS",
    "LongForm",
    "StreamEvent",
    "StreamSettings",
    "Streamer",
    "add_base_args",
    "add_long_form_args",
    "bases_from_args",
    "batch_transcriber",
    "check_max_seconds",
    "clip_spans",
    "condition",
    "dataset_clips",
    "evaluate",
    "feed_many",
    "fitted",
    "load_clip",
    "load_model",
    "local_model",
    "long_form_for",
    "long_form_from_args",
    "pcm_pieces",
    "resolve_model_dir",
    "run_bases",
    "served",
    "stream_wave",
    "timed_clip",
    "transcribe_files",
    "transcribe_detected",
    "transcribe_live",
    "transcribe_timed",
    "transcribe_waves",
    "Task",
]
