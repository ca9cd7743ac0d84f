"""Long-form audio: how a recording of any length is cut into windows the model takes (cut.py), batched
(batching.py) and joined again (stitch.py), under one frozen `LongForm` of settings (settings.py); and
live: a recording fed in pieces, committing text as it goes (streaming.py, its settings and events in
stream_settings.py).
numpy and the standard library only: every model folder carries these files word for word
(speechlm.model.folder.generate), so `transformers.pipeline` and `speechlm transcribe` cut alike."""
