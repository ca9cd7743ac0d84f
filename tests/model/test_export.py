"""The transformers-native export (speechlm.model.folder): built from each encoder family's tiny twin, it
loads with AutoModel and pipeline("automatic-speech-recognition") where speechlm can't be imported,
and both routes give `speechlm transcribe`'s transcripts; the merged-LoRA export keeps the logits."""

import copy
import json

import numpy as np
import pytest
import soundfile as sf
import torch

import nospeechlm
from model_helpers import batch, trained_looking, waves
from speechlm.inference import transcribe_files
from speechlm.model import from_pretrained, save_pretrained
from speechlm.model.folder import generate, write_export

LOAD_BOTH_WAYS = """
import json, sys
import numpy as np
import soundfile as sf
from transformers import AutoModel, pipeline
folder, paths = sys.argv[1], sys.argv[2:]
model = AutoModel.from_pretrained(folder, trust_remote_code=True)
waves = [sf.read(p, dtype="float32")[0] for p in paths]
auto = model.transcribe(waves)
asr = pipeline("automatic-speech-recognition", model=folder, trust_remote_code=True)
one = [asr(p)["text"] for p in paths]
many = [r["text"] for r in asr(paths)]
timed = model.transcribe(waves, timestamps=True)
words = [asr(p, return_timestamps="word") for p in paths]
segments = [asr(p, return_timestamps=True)["chunks"] for p in paths]
refused = []  # each bad input refused on its own, by name (issue 36)
for call in (lambda: model.transcribe([waves[0], np.full(400, np.nan, np.float32)]),
             lambda: model.transcribe([np.zeros(0, np.float32)]),
             lambda: asr({"raw": np.zeros(100, np.float32), "sampling_rate": 1}),
             lambda: asr([paths[0], np.full(3, np.inf, np.float32)])):
    try:
        call()
        refused.append(None)
    except ValueError as e:
        refused.append(str(e))
print(json.dumps({"auto": auto, "pipeline": one, "pipeline_batch": many, "class": type(model).__name__,
                  "timed": timed, "word_chunks": words, "segment_chunks": segments, "refused": refused}))
"""


STREAM_WITHOUT_SPEECHLM = """
import json, sys
import numpy as np
from transformers import AutoModel
folder, wave_path = sys.argv[1], sys.argv[2]
model = AutoModel.from_pretrained(folder, trust_remote_code=True)
wave = np.load(wave_path)
stream = model.stream(chunk_seconds=0.4)
events = []
for i in range(0, len(wave), 1600):  # 0.1 s pieces
    events += stream.feed(wave[i : i + 1600])
events += stream.finish()
rows = [[e.delta, list(e.words), e.text, e.final] for e in events]
print(json.dumps({"module": type(stream).__module__, "events": rows}))
"""


def _trained_looking(encoder, decoder, bf16=True, lora_std=0.5):
    return trained_looking(encoder, decoder, bf16, lora_std)


@pytest.fixture(scope="module")
def nospeechlm_python(tmp_path_factory):
    return nospeechlm.make_env(tmp_path_factory.mktemp("env"))


def test_generated_code_is_speechlms_own_and_imports_nothing_else():
    files = generate.remote_files()
    core = files["speechlm_core.py"]
    import importlib
    import inspect

    from speechlm.model.encoders import whisper
    from speechlm.model.speechlm import SpeechLM as Live

    # the live method's source appears verbatim: an edit to speechlm changes the export with it
    assert inspect.getsource(Live.embed) in core and inspect.getsource(whisper.VarLenWhisperEncoder.forward) in core
    # the verbatim modules word for word, but for their imports of each other (relative, or of another
    # verbatim module by its speechlm name: the sample rate's home), renamed to the siblings' files
    verbatim = tuple(f"from {m} import" for m in generate.VERBATIM.values())
    for fname, mod_name in generate.VERBATIM.items():
        ours, theirs = inspect.getsource(importlib.import_module(mod_name)).splitlines(), files[fname].splitlines()
        changed = [(a, b) for a, b in zip(ours, theirs) if a != b]
        assert len(ours) == len(theirs) and all(a.startswith(("from .", *verbatim)) for a, _ in changed), fname
        for _, b in changed:
            assert b.split()[1].removeprefix(".") + ".py" in files, (fname, b)
    assert "from .speechlm_cut import clip_spans" in files["speechlm_batching.py"]
    assert "from .speechlm_audio_checks import SAMPLE_RATE" in files["speechlm_longform.py"]
    with pytest.raises(ValueError, match="not a VERBATIM module"):
        generate.sibling_imports("from .loading import x\n", "speechlm.model.align")
    with pytest.raises(ValueError, match="imports speechlm.config"):
        generate.check_imports("import torch\ndef f():\n    from speechlm.config import ConfigError\n", "x.py")


@pytest.mark.slow
def test_the_export_streams_live_without_speechlm_as_speechlm_does(tmp_path, nospeechlm_python):
    """The folder's `model.stream()` is speechlm's Streamer (speechlm_streaming.py, carried word for
    word): fed the same pieces where speechlm can't be imported, it commits the same words at the same
    moments with the same times as `stream_wave` in speechlm."""
    from speechlm.inference import StreamSettings, stream_wave

    model = _trained_looking("tiny/whisper", "tiny/qwen3", bf16=False)
    model.cfg.max_new_tokens = 8
    rng = np.random.default_rng(2)
    parts = [(1.0, 0.1), (0.6, 0.0), (1.2, 0.1), (0.5, 0.0), (0.8, 0.05)]
    wave = np.concatenate([(a * rng.standard_normal(int(s * 16000))).astype(np.float32) for s, a in parts])
    expected = list(stream_wave(model, wave, StreamSettings(chunk_seconds=0.4), piece_seconds=0.1))
    assert expected[-1].text and sum(bool(e.delta) for e in expected) >= 2  # committed in steps
    folder = write_export(model, tmp_path / "hf")
    np.save(tmp_path / "wave.npy", wave)
    got = nospeechlm.run(
        nospeechlm_python, STREAM_WITHOUT_SPEECHLM, str(folder), str(tmp_path / "wave.npy"), cwd=tmp_path
    )
    assert got["module"].endswith("speechlm_streaming")
    ours = [[e.delta, list(e.words), e.text, e.final] for e in expected]
    assert got["events"] == json.loads(json.dumps(ours))


@pytest.mark.slow
@pytest.mark.parametrize("encoder,decoder", [("tiny/whisper", "tiny/llama3"), ("tiny/granite_speech5", "tiny/qwen3")])
def test_export_loads_without_speechlm_and_transcribes_like_speechlm(tmp_path, nospeechlm_python, encoder, decoder):
    live = _trained_looking(encoder, decoder)
    save_pretrained(live, tmp_path / "native")
    model = from_pretrained(tmp_path / "native")  # what `speechlm transcribe` runs
    rng = np.random.default_rng(1)
    paths = []
    # a short clip, a longer one, one past the 20 s window (cut at a pause into two windows), and one of
    # 5 samples: padded to the encoder's smallest input, it no longer fails the batch it shares (issue 36)
    long = np.concatenate(
        [waves((16000 * 12,), seed=3)[0], np.zeros(8000, np.float32), waves((16000 * 11,), seed=4)[0]]
    )
    for i, w in enumerate([*waves((16000, 41000)), long, waves((5,), seed=5)[0]]):
        p = tmp_path / f"clip{i}.wav"
        sf.write(p, (w + 0.0 * rng.standard_normal(len(w))).astype(np.float32), 16000)
        paths.append(str(p))
    expected = transcribe_files(model, paths)
    assert all(expected) and len(set(expected)) >= 2  # clips a route mixed up would show
    folder = write_export(model, tmp_path / "hf")
    assert {
        "config.json",
        "model.safetensors",
        "preprocessor_config.json",
        "README.md",
        "tokenizer.json",
        "modeling_speechlm.py",
        "speechlm_core.py",
    } <= {p.name for p in folder.iterdir()}
    got = nospeechlm.run(nospeechlm_python, LOAD_BOTH_WAYS, str(folder), *paths, cwd=tmp_path)
    assert got["class"] == "SpeechLMForASR"
    assert got["auto"] == expected and got["pipeline"] == expected and got["pipeline_batch"] == expected
    nan, empty, rate, inf = got["refused"]
    assert "clip 1: non-finite samples" in nan and "clip 0: no samples" in empty
    assert "sample rate 1 Hz" in rate and "input 1: non-finite samples" in inf
    # word timestamps: the same words and times as speechlm's, in transformers' chunk convention
    from speechlm.inference import transcribe_timed

    ours = transcribe_timed(model, [sf.read(p, dtype="float32")[0] for p in paths])
    assert got["timed"] == json.loads(json.dumps(ours))
    for mine, chunks, segs in zip(ours, got["word_chunks"], got["segment_chunks"]):
        assert chunks["text"] == mine["text"]
        assert chunks["chunks"] == [{"text": w["text"], "timestamp": [w["start"], w["end"]]} for w in mine["words"]]
        assert segs == [{"text": s["text"], "timestamp": [s["start"], s["end"]]} for s in mine["segments"]]


def test_merged_lora_export_keeps_the_logits(tmp_path):
    from transformers import AutoModel, AutoModelForCausalLM

    # an adapter of a trained one's size: its update small beside the frozen weights
    model = _trained_looking("tiny/whisper", "tiny/llama3", lora_std=0.05)
    b = batch(model, waves())
    args = [b[k] for k in ("input_features", "feature_mask", "input_ids", "attention_mask", "labels")]
    with torch.no_grad():
        ref, targets, _ = model.label_logits(*args)
        folder = write_export(model, tmp_path / "merged", merge_lora=True)
        config = json.loads((folder / "config.json").read_text())
        assert config["lora"] is None and (folder / "decoder" / "config.json").is_file()
        merged = AutoModel.from_pretrained(folder, trust_remote_code=True)
        assert not any("lora_" in n for n, _ in merged.named_parameters())
        got, got_targets, _ = merged(*args)
        assert torch.equal(targets, got_targets)
        # "within bf16 tolerance": the merged model is no further from the exact (fp32, unmerged)
        # logits than the unmerged bf16 model itself is (merging rounds W + BA once into bf16)
        exact = copy.deepcopy(model).float()
        exact.bf16 = False
        ref32 = exact.label_logits(*args)[0]
        bf16_error = (ref.float() - ref32).abs().max()
        assert 0 < (got.float() - ref32).abs().max() <= 2 * bf16_error
        agree = (got.argmax(-1) == ref32.argmax(-1)).float().mean()
        assert agree >= (ref.argmax(-1) == ref32.argmax(-1)).float().mean() - 0.05
        # the plain decoder on its own equals the merged model's decoder on text
        plain = AutoModelForCausalLM.from_pretrained(folder / "decoder")
        ids = b["input_ids"][:, -6:]
        inner = merged.model.decoder(input_ids=ids).logits
        assert torch.equal(plain(input_ids=ids).logits, inner)
        # and the check could tell a dropped adapter from a merged one
        with model.decoder.disable_adapter():
            without = model.label_logits(*args)[0]
        assert (without.float() - ref32).abs().max() > 4 * bf16_error


def test_model_card_states_recipe_data_wer_and_usage(tmp_path):
    model = _trained_looking("tiny/whisper", "tiny/llama3")
    folder = write_export(
        model,
        tmp_path / "hf",
        card={
            "repo": "me/my-asr",
            "steps": 150,
            "data": [{"name": "synthetic", "hours": 2.6}],
            "eval": [{"dataset": "synthetic", "clips": 80, "wer": 0.171, "orthographic_wer": 0.2}],
        },
    )
    card = (folder / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers\npipeline_tag: automatic-speech-recognition")
    assert "| synthetic | 80 | 17.10 |" in card and "synthetic: hours 2.6" in card
    assert "model-index:" in card and "value: 17.10" in card  # the Hub reads the figures from the metadata
    assert "PATH_OR_REPO" not in card and "github.com/)" not in card
    assert 'pipeline("automatic-speech-recognition", model="me/my-asr", trust_remote_code=True)' in card
    assert "tiny/whisper" in card and "LoRA adapter (r4, alpha 8)" in card


@pytest.mark.parametrize("encoder", ["tiny/whisper", "tiny/granite_speech5"])
def test_exported_features_equal_speechlms_bit_for_bit(tmp_path, encoder):
    # transformers builds the exported model under its weights' dtype (bf16): a feature tensor made
    # without an explicit dtype came out bf16 there, and the log-mel moved by up to 0.17
    from transformers import AutoModel

    model = _trained_looking(encoder, "tiny/llama3")
    exported = AutoModel.from_pretrained(write_export(model, tmp_path / "hf"), trust_remote_code=True)
    clips = waves((16000, 29000))
    ours, theirs = model.features(clips), exported.model.features(clips)
    assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])


def test_the_card_states_clip_counts_non_speech_parts_and_a_derived_licence(tmp_path):
    """Issue 36: every eval figure with the clips it was measured on; a non-speech part scored by the
    share said empty (not a WER); the licence derived from the bases' own cards where they declare one."""
    import shutil

    from speechlm.model import ids
    from speechlm.model.folder.card import licence

    bases = {}
    for part, tiny, lic in (("encoder", "tiny/whisper", "apache-2.0"), ("decoder", "tiny/qwen3_5", "mit")):
        bases[part] = shutil.copytree(ids.resolve(tiny), tmp_path / f"my-{part}")
        (bases[part] / "README.md").write_text(f"---\nlicense: {lic}\ntags: [x]\n---\n# a base\n")
    model = _trained_looking(str(bases["encoder"]), str(bases["decoder"]))
    scores = {"eval/wer/random": 0.25, "eval/empty_share/nonspeech": 0.875}
    scores.update({"eval/clips/random": 16, "eval/clips/nonspeech": 8, "eval/capped": 0})
    training_eval = {"step": 10, "loss": 1.5, "sets": ["synthetic"], "scores": scores}
    folder = write_export(model, tmp_path / "hf", card={"training_eval": training_eval})
    card = (folder / "README.md").read_text()
    assert "| synthetic (random) | 16 | 25.00 |  |" in card and "| synthetic (nonspeech) | 8 |  | 87.50 |" in card
    assert "scored by the share of its clips transcribed as empty" in card
    assert "- type: empty_share\n      value: 87.50\n      name: said empty (8 clips)" in card
    assert (
        "\nlicense: other\n" in card
        and "the encoder `my-encoder`: `apache-2.0`; the decoder `my-decoder`: `mit`" in card
    )
    refs = json.loads((folder / "config.json").read_text())["bases"]
    assert refs["encoder"]["license"] == "apache-2.0" and refs["decoder"]["license"] == "mit"
    # bases that agree give their licence; one not recorded (the tiny twins have no card) gives `other`
    same = {"encoder": {"id": "a", "license": "mit"}, "decoder": {"id": "b", "license": "mit"}}
    assert licence({}, same) == ("mit", None)
    lic, line = licence({}, {"encoder": {"id": "tiny/whisper"}, "decoder": {"id": "b", "license": "mit"}})
    assert lic == "other" and "`tiny/whisper`: not recorded" in line
    assert licence({"license": "cc-by-4.0"}, same) == ("cc-by-4.0", None)


def test_the_card_lists_its_languages_and_a_model_index_entry_per_language_and_task(tmp_path):
    """Issue 38: `language:` lists the model's languages; the model-index has one result per language and
    task (WER, CER, chrF of a translation pair, language ID), each with its clips; parts keep theirs."""
    from speechlm.model.folder.card import eval_rows, language_rows

    model = _trained_looking("tiny/whisper", "tiny/llama3")
    model.cfg.languages = ["en", "es", "ja"]
    scores = {"eval/wer/random": 0.5, "eval/clips/random": 4, "eval/wer/es": 0.25, "eval/cer/ja": 0.125}
    scores.update({"eval/chrf/es-en": 41.5, "eval/lid": 0.75, "eval/clips/transcribe/es": 6})
    scores.update({"eval/clips/transcribe/ja": 3, "eval/clips/translate/es-en": 5, "eval/other_language/es": 0})
    info = {"training_eval": {"step": 5, "loss": 1.0, "sets": ["ml"], "scores": scores}}
    card = (write_export(model, tmp_path / "hf", card=info) / "README.md").read_text()
    assert "\nlanguage:\n  - en\n  - es\n  - ja\n" in card
    assert [r["dataset"] for r in eval_rows(info)] == ["ml (random)"]  # a language is not a part
    got = {(r["language"], r["task"], r["metric"]): (r["value"], r["clips"]) for r in language_rows(info)}
    assert got == {
        ("es", "transcribe", "wer"): (25.0, 6),
        ("ja", "transcribe", "cer"): (12.5, 3),
        ("es-en", "translate", "chrf"): (41.5, 5),
        (None, "lid", "lid"): (75.0, None),
    }
    assert "      type: translation\n      name: Speech Translation\n    dataset:\n      name: ml (es-en)" in card
    assert (
        "      config: ja\n      args:\n        language: ja\n    metrics:\n    - type: cer\n      value: 12.50" in card
    )
    assert "    - type: accuracy\n      value: 75.00\n      name: language ID accuracy (all)" in card
    assert "| ml | es | transcribe | WER | 25.00 | 6 |" in card
    # an English-only model: `en`, and no entry per language
    model.cfg.languages = []
    plain = (write_export(model, tmp_path / "en", card={}) / "README.md").read_text()
    assert "\nlanguage:\n  - en\n" in plain and "Per language and task" not in plain


PIPELINE_LANGUAGES = """
import json, sys
from transformers import pipeline
folder, paths = sys.argv[1], sys.argv[2:]
asr = pipeline("automatic-speech-recognition", model=folder, trust_remote_code=True)
asked = [{}, {"language": "es"}, {"language": "spanish", "task": "translate"}, {"language": "<|es|>"},
         {"language": "es", "prompt": "Anna y Leo"}]
got = [[asr(p, generate_kwargs=kw)["text"] for p in paths] for kw in asked]
got.append([r["text"] for r in asr(paths, generate_kwargs={"language": "es-ES", "task": "translate"})])
refused = []
for kw, extra in (({"language": "ja"}, {}), ({"num_beams": 2}, {}),
                  ({"task": "translate"}, {"return_timestamps": "word"}), ({"task": "summarize"}, {})):
    try:
        asr(paths[0], generate_kwargs=kw, **extra)
        refused.append(None)
    except ValueError as e:
        refused.append(str(e))
print(json.dumps({"texts": got, "refused": refused}))
"""


@pytest.mark.slow
def test_the_pipeline_takes_whispers_language_and_task_without_speechlm(tmp_path, nospeechlm_python):
    """Issue 38: `generate_kwargs={"language": "es", "task": "translate"}` as Whisper's pipeline takes it
    (codes, names, `<|es|>`; `prompt` as context), where speechlm can't be imported: the texts speechlm
    gives for that language, task and context; a language the model does not list, another generate key,
    word times of a translation and an unknown task are refused by name."""
    from speechlm.inference import Task, transcribe_waves

    model = _trained_looking("tiny/whisper", "tiny/qwen3", bf16=False)
    model.cfg.languages, model.cfg.answer_language = ["en", "es"], True
    paths, clips = [], waves((16000, 24000), seed=7)
    for i, w in enumerate(clips):
        sf.write(tmp_path / f"clip{i}.wav", w, 16000)
        paths.append(str(tmp_path / f"clip{i}.wav"))
    clips = [sf.read(p, dtype="float32")[0] for p in paths]
    plain, pinned, translated, context = (
        transcribe_waves(model, clips, task=t)
        for t in (None, Task("es"), Task("es", "translate"), Task("es", "transcribe", "Anna y Leo"))
    )
    assert pinned != plain and translated != pinned  # the prompt each route asks shows in the texts
    folder = write_export(model, tmp_path / "hf")
    got = nospeechlm.run(nospeechlm_python, PIPELINE_LANGUAGES, str(folder), *paths, cwd=tmp_path)
    assert got["texts"] == [plain, pinned, translated, pinned, context, translated]
    other, beams, words, task = got["refused"]
    assert "language 'ja' is not supported: this model serves en, es" in other
    assert "generate_kwargs num_beams: not taken by this model" in beams
    assert "return_timestamps='word' is for transcription" in words and "task 'summarize'" in task
