"""Transcribe with vLLM's Python API (`vllm.LLM`) as `speechlm transcribe` does: each recording cut by the
folder's long-form cut, every window one request with its exact token budget, the loop cut on the
generated token ids, the windows' texts joined by the folder's own join.

    from vllm import LLM
    from speechlm_vllm.offline import transcribe
    llm = LLM(FOLDER, max_model_len=1024, limit_mm_per_prompt={"audio": 1})
    texts = transcribe(llm, waves)            # 16 kHz mono float32 arrays, any length

(vLLM starts its engine in a spawned process: call it under `if __name__ == "__main__":`.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import stops
from .folder import SAMPLE_RATE, load


def requests(folder, waves: Sequence[np.ndarray], language=None, task: str = "transcribe", context=None):
    """(prompts, sampling parameters) for clips that fit the encoder: one request per clip, greedy,
    stopped at the end-of-turn token only (not the tokenizer's EOS, as speechlm) or by the stop rules;
    each asked `language` (None: the model detects it), `task` and `context` as SpeechLM.transcribe asks."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    prompt, given = folder.asked_ids(1, language, task, context)
    language = language if folder.multilingual else None
    prompts, params = [], []
    for w in waves:
        b = stops.budget(folder, len(w), language, len(given))
        prompts.append(TokensPrompt(prompt_token_ids=prompt + given, multi_modal_data={"audio": (w, SAMPLE_RATE)}))
        params.append(
            SamplingParams(
                temperature=0.0,
                max_tokens=b,
                stop_token_ids=[folder.end_of_turn_id],
                ignore_eos=True,
                extra_args={stops.EXTRA_KEY: b},
            )
        )
    return prompts, params


def transcribe_windows(llm, waves: Sequence[np.ndarray], **asked) -> list[dict]:
    """Per clip (each at most the encoder's limit) {"text", "tokens"}: the text speechlm keeps, and the
    new token ids before the loop cut. `asked`: `requests`' language, task and context."""
    folder = load(llm.llm_engine.model_config.model)
    prompts, params = requests(folder, waves, **asked)
    outs = llm.generate(prompts, params, use_tqdm=False)
    return [
        {"text": stops.text_of(folder, list(o.outputs[0].token_ids)), "tokens": list(o.outputs[0].token_ids)}
        for o in outs
    ]


def transcribe(llm, waves: Sequence[np.ndarray], long_form=None, **asked) -> list[str]:
    """Texts of recordings of any length (long_form: the folder's LongForm; default its defaults); `asked`:
    the language, task and context every window is asked (`requests`)."""
    folder = load(llm.llm_engine.model_config.model)
    lf = long_form or folder.long_form()
    spans = [folder.spans(np.asarray(w, dtype=np.float32), lf) for w in waves]
    pieces = [np.asarray(w[s:e], dtype=np.float32) for w, clip in zip(waves, spans) for s, e in clip]
    texts = [o["text"] for o in transcribe_windows(llm, pieces, **asked)] if pieces else []
    out, k = [], 0
    for clip in spans:
        out.append(folder.stitch.join(texts[k : k + len(clip)], lf.strategy))
        k += len(clip)
    return out
