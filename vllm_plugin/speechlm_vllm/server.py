"""vLLM's transcription endpoint with speechlm's long-form cut.

vLLM's `/v1/audio/transcriptions` decodes a recording, cuts it into chunks (its own energy-based cut,
at `max_audio_clip_s`), transcribes each chunk as one request and joins the texts with a space.
speechlm cuts every recording, short ones too, at its pauses (the folder's speechlm_cut.py), and joins
the windows' texts with a space, leaving out empty ones. `install()` wraps the endpoint's one cutting
step (`SpeechToTextBaseServing._decode_and_chunk_speech`) so that a model class with
`speechlm_windows` gets its recordings cut that way; every other model keeps vLLM's cut.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def install() -> None:
    try:
        from vllm.entrypoints.speech_to_text.base.serving import SpeechToTextBaseServing
    except ImportError:  # a vLLM without the endpoint (or with it elsewhere): nothing to wrap
        log.warning("speechlm_vllm: vLLM's speech-to-text serving was not found; long audio is cut by vLLM")
        return
    original = SpeechToTextBaseServing._decode_and_chunk_speech
    if getattr(original, "_speechlm", False):
        return

    def decode_and_cut(self, audio_data: bytes):
        chunks, duration = original(self, audio_data)
        cut = getattr(self.model_cls, "speechlm_windows", None)
        if cut is None:
            return chunks, duration
        windows = [w for c in chunks for w in cut(self.model_config, c)]
        # a recording with no sound at all: one window, whose text the model gives (vLLM needs one request)
        return windows or chunks[:1], duration

    decode_and_cut._speechlm = True
    SpeechToTextBaseServing._decode_and_chunk_speech = decode_and_cut
