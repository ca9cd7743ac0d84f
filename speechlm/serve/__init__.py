"""Serve a speechlm model behind OpenAI's transcription API, with dynamic batching.

    speechlm serve MODEL [--host 127.0.0.1] [--port 8000] [--max-batch 16] [--max-wait-ms 10]

FastAPI on uvicorn (the `serve` extra: `pip install 'speechlm[serve]'`); the flags are
speechlm/commands/serve.py. Modules: `server` (the process: the draining uvicorn server), `app`
(endpoints, limits, errors), `batcher` (the model worker thread and its batches), `engine` (the one
route into speechlm's inference: decode, cut, batch, join), `formats` (json, text, srt, vtt,
verbose_json), `errors` (OpenAI's error shape); live transcription: `live` (`stream=true`, and the
model a live `Streamer` decodes through the worker), `realtime` + `realtime_session` + `turns` (the
Realtime API's transcription sessions over a WebSocket, server VAD). docs/design.md, "Serving".
"""
