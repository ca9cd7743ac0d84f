"""The vLLM plugin beyond Whisper + Llama: a folder with the Granite Speech encoder and a Qwen3 decoder
(vLLM's own qwen3.py) gives `speechlm transcribe`'s greedy texts through vLLM's Python API, clip by clip
and for a recording cut at its pauses, and stops where speechlm stops (budget and loop cut).

One folder carries both new parts, so the module starts one vLLM engine (vllm_side.py, one process).
Like the Whisper + Llama twin of test_vllm_serve.py, its decoder has heads of 64 (vLLM's CPU attention
refuses tiny/qwen3's 16) and its texts are noise: a strict check (a lost adapter, projector or
placeholder changes every token)."""

import numpy as np
import pytest
import soundfile as sf

from speechlm.inference import transcribe_waves
from vllm_helpers import run_vllm, tiny_folder, vllm_python

pytestmark = pytest.mark.slow

SR = 16000
SECONDS = (0.6, 1.5, 3.0, 4.7, 7.9)


def _recording(rng) -> np.ndarray:
    """~35 s: bursts of noise (speech-like level) between half-second pauses, cut at each pause."""
    parts = []
    while sum(map(len, parts)) < 35 * SR:
        parts += [0.1 * rng.standard_normal(int(rng.uniform(1.5, 4.0) * SR)), np.zeros(SR // 2)]
    return np.concatenate(parts).astype(np.float32)


@pytest.fixture(scope="module")
def granite_qwen3(tmp_path_factory):
    vllm_python()
    root = tmp_path_factory.mktemp("vllm-families")
    model, folder = tiny_folder(
        root / "model",
        encoder="tiny/granite_speech5",
        decoder="qwen3",
        max_new_tokens=40,
        tokens_per_second=4.0,
        new_tokens_margin=2,
    )
    assert model.family.name == "granite_speech5" and model.decoder.config.model_type == "qwen3"
    rng = np.random.default_rng(3)
    clips = [(0.1 * rng.standard_normal(int(s * SR))).astype(np.float32) for s in SECONDS]
    paths = []
    for i, w in enumerate(clips + [_recording(rng)]):
        paths.append(root / f"clip{i}.wav")
        sf.write(paths[-1], w, SR, subtype="FLOAT")
    got = run_vllm("offline", folder, {"clips": [str(p) for p in paths[:-1]], "recordings": [str(paths[-1])]})
    return {"model": model, "clips": clips, "recording": sf.read(paths[-1], dtype="float32")[0], "got": got}


def test_granite_and_qwen3_clips_give_speechlms_text_and_stop_where_it_does(granite_qwen3):
    model, clips, got = granite_qwen3["model"], granite_qwen3["clips"], granite_qwen3["got"]
    want = [model.transcribe([w], details=True)[0] for w in clips]  # each clip alone, as one vLLM request
    assert [w["text"] for w in got["windows"]] == [w["text"] for w in want]
    assert any(w["text"] for w in want)  # not a match of empty texts
    eot = model.tokenizer.convert_tokens_to_ids("<|im_end|>")  # ChatML's end of turn
    capped = looped = 0
    for w, v, budget in zip(want, got["windows"], got["budgets"]):
        tokens = [t for t in v["tokens"] if t != eot]
        assert len(tokens) <= budget
        if w["capped"]:
            capped += 1
            assert len(tokens) == budget
        if w["loop"]:
            looped += 1
            assert len(tokens) >= w["tokens"]
    assert capped and looped, (capped, looped)
    # the engine's budget from a clip's placeholder count is never shorter than the exact one
    assert all(p >= b for p, b in zip(got["placeholder_budgets"], got["budgets"]))


def test_granite_and_qwen3_recording_is_cut_and_joined_as_speechlm_does(granite_qwen3):
    model = granite_qwen3["model"]
    want = transcribe_waves(model, [granite_qwen3["recording"]])
    assert granite_qwen3["got"]["texts"] == want
    assert want[0].strip()
