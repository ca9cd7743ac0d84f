"""`python -m speechlm.serve MODEL`: serve a model behind OpenAI's transcription API."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from speechlm.config import cli_errors, command_parser
from speechlm.inference import add_base_args, add_long_form_args, bases_from_args, long_form_from_args
from speechlm.serve.config import API_KEY_ENV, MAX_SECONDS, MAX_UPLOAD_MB, ServeConfig

EXAMPLES = f"""\
examples:
  speechlm serve outputs/demo/final                          # http://127.0.0.1:8000, model name "final"
  speechlm serve outputs/RUN/checkpoints/step-2000/model --host 0.0.0.0 --port 8000 --max-batch 32
  {API_KEY_ENV}=KEY speechlm serve user/my-asr --served-model-name whisper-1

  curl http://127.0.0.1:8000/v1/audio/transcriptions -H "Authorization: Bearer KEY" \\
       -F file=@meeting.flac -F model=final -F response_format=srt

MODEL is whatever `speechlm transcribe -m` takes: an export folder, a checkpoint step-N, a run
folder (its latest checkpoint) or a Hub id. Audio is cut and transcribed as transcribe does it (the same
long-form flags); the segments of concurrent requests share the model's batches.
"""


def build_parser(prog: str = "python -m speechlm.serve") -> argparse.ArgumentParser:
    ap = command_parser(
        prog, "Serve a speechlm model behind OpenAI's transcription API (POST /v1/audio/transcriptions).", EXAMPLES
    )
    ap.add_argument("model", help="export folder, checkpoint, run folder or Hub id")
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument(
        "--served-model-name",
        action="append",
        default=None,
        help="a `model` value clients may send (repeatable; default: the model folder's name)",
    )
    ap.add_argument(
        "--api-key",
        default=None,
        help=f"require 'Authorization: Bearer KEY' (default: ${API_KEY_ENV}; prefer the variable: "
        "a flag shows in the process list)",
    )
    ap.add_argument("--max-batch", type=int, default=16, help="segments per model batch")
    ap.add_argument(
        "--max-per-request",
        type=int,
        default=4,
        help="one request's segments per batch: lower keeps a long file's batches short, so short requests "
        "wait less behind it; higher transcribes a lone long file faster",
    )
    ap.add_argument("--max-wait-ms", type=float, default=10.0, help="longest wait for a batch to fill")
    ap.add_argument("--max-concurrent", type=int, default=64, help="requests at once; beyond it: 503 with Retry-After")
    ap.add_argument("--max-upload-mb", type=float, default=MAX_UPLOAD_MB, help="larger uploads: 413")
    ap.add_argument("--max-seconds", type=float, default=MAX_SECONDS, help="longer audio: 400")
    add_long_form_args(ap)
    add_base_args(ap)
    ap.add_argument(
        "--shutdown-timeout",
        type=float,
        default=60.0,
        help="on SIGTERM, how long requests in flight may take to finish, in all (new ones get 503; those "
        "still running then get 503 shutting_down)",
    )
    ap.add_argument(
        "--read-timeout",
        type=float,
        default=30.0,
        help="an upload that sends nothing for this many seconds gets 408 (it holds no model slot meanwhile)",
    )
    ap.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return ap


def config_from_args(args) -> ServeConfig:
    cfg = ServeConfig(
        model=args.model,
        host=args.host,
        port=args.port,
        served_model_names=args.served_model_name or [],
        api_key=args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV),
        max_batch=args.max_batch,
        max_per_request=args.max_per_request,
        max_wait_ms=args.max_wait_ms,
        max_concurrent=args.max_concurrent,
        max_upload_mb=args.max_upload_mb,
        max_seconds=args.max_seconds,
        shutdown_timeout=args.shutdown_timeout,
        read_timeout=args.read_timeout,
        long_form=long_form_from_args(args),
    )
    cfg.check()
    return cfg


@cli_errors
def main(argv=None, prog: str = "python -m speechlm.serve"):
    args = build_parser(prog).parse_args(argv)
    cfg = config_from_args(args)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from speechlm.serve.server import serve  # fastapi, uvicorn and the model stack once the arguments parse

    code = serve(cfg, bases_from_args(args), args.log_level)
    # out now: the interpreter's own teardown with torch loaded (and a worker thread perhaps mid-batch)
    # took ~2 s more here, past --shutdown-timeout; everything worth keeping is answered or logged
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
