"""A multilingual folder under vLLM (issue 38's routes): each clip asked a pinned language, a translation or
nothing gives `speechlm transcribe`'s greedy text for the same asking through vLLM's Python API: the
prompt states the language and task, a pin's opening is given, a detected one is taken off the text, and
the budget is the pinned language's. One engine for the module (vllm_side.py, one process)."""

import numpy as np
import pytest
import soundfile as sf

from vllm_helpers import run_vllm, tiny_folder, vllm_python, vllm_server

pytestmark = pytest.mark.slow

SR = 16000
ASKED = [{}, {"language": "es"}, {"language": "de", "context": "Anna"}, {"task": "translate"}]


@pytest.fixture(scope="module")
def multilingual(tmp_path_factory):
    vllm_python()
    root = tmp_path_factory.mktemp("vllm-languages")
    model, folder = tiny_folder(
        root / "model",
        bf16=False,
        max_new_tokens=24,
        new_tokens_margin=2,
        answer_language=True,
        languages=["en", "es", "de"],
        tokens_per_second_by_language={"en": 3.0, "es": 6.0, "de": 4.0},
    )
    rng = np.random.default_rng(5)
    clips = [(0.1 * rng.standard_normal(int(s * SR))).astype(np.float32) for s in (0.8, 2.0, 3.5)]
    paths = []
    for i, w in enumerate(clips):
        paths.append(root / f"clip{i}.wav")
        sf.write(paths[-1], w, SR, subtype="FLOAT")
    got = run_vllm("offline", folder, {"clips": [str(p) for p in paths], "asked": ASKED, "dtype": "float32"})
    return model, clips, got["asked"], folder, paths


def test_each_asking_gives_speechlms_text(multilingual):
    model, clips, got, _, _ = multilingual
    for asked, windows in zip(ASKED, got):
        want = [model.transcribe([w], **asked)[0] for w in clips]  # each clip alone, as one vLLM request
        assert [w["text"] for w in windows] == want, asked
    texts = [[w["text"] for w in windows] for windows in got]
    assert len({tuple(t) for t in texts}) > 1 and any(any(t) for t in texts)  # the askings answer apart


def test_vllm_serve_takes_openais_language_prompt_and_translations(multilingual):
    """`vllm serve` with the official `openai` client: `language` (a code or a name) pins, `prompt` is
    context, `/v1/audio/translations` translates, each giving speechlm's text (clips of 320 n samples: the
    budget the engine reads off the placeholders and the pinned opening is the exact one); a language the
    model does not serve is a 400 naming the ones it does."""
    from openai import BadRequestError, OpenAI

    model, clips, _, folder, paths = multilingual
    with vllm_server(folder, "--dtype", "float32") as url:
        client = OpenAI(base_url=url + "/v1", api_key="unused")
        for w, path in zip(clips, paths):
            pinned = client.audio.transcriptions.create(
                model="speechlm", file=path.read_bytes(), language="de", prompt="Anna"
            )
            assert pinned.text == model.transcribe([w], language="de", context="Anna")[0]
            named = client.audio.transcriptions.create(model="speechlm", file=path.read_bytes(), language="spanish")
            assert named.text == model.transcribe([w], language="es")[0]
            translated = client.audio.translations.create(model="speechlm", file=path.read_bytes())
            assert translated.text == model.transcribe([w], task="translate")[0]
        with pytest.raises(BadRequestError, match="this model serves en, es, de"):
            client.audio.transcriptions.create(model="speechlm", file=paths[0].read_bytes(), language="ja")
