"""Live transcription (speechlm.model.longform.streaming, issue 40) on a tiny twin: what is committed is
never taken back, the final text is the committed text, pauses close the window as the offline
long-form cut would (the same text when nothing was committed before), a window past its cap is
closed, `finish()` commits the rest, several streams decode as one batch, and bad settings and bad
audio fail with their names."""

from __future__ import annotations

import numpy as np
import pytest

from model_helpers import trained_looking
from speechlm.inference import transcribe_waves
from speechlm.model.longform.streaming import (
    DEFAULT_STREAM_SETTINGS,
    Streamer,
    StreamSettings,
    agreed,
    feed_many,
    stream_wave,
)

SR = 16000


@pytest.fixture(scope="module")
def model():
    # fp32: the test compares a stream with the offline route decode for decode
    m = trained_looking("tiny/whisper", "tiny/qwen3", bf16=False)
    m.cfg.max_new_tokens = 8
    return m


def _bursts(*parts: tuple[float, float], seed: int = 5) -> np.ndarray:
    """Noise bursts and digital silence: (seconds, level) each, level 0 for silence."""
    rng = np.random.default_rng(seed)
    return np.concatenate([(level * rng.standard_normal(int(s * SR))).astype(np.float32) for s, level in parts])


def _retractions(events) -> int:
    """Events whose text does not start with the text before it: what a client would see taken back."""
    texts = [""] + [e.text for e in events]
    return sum(not b.startswith(a) for a, b in zip(texts, texts[1:]))


def test_settings_are_checked_by_name():
    for bad, name in [
        ({"chunk_seconds": 0}, "chunk_seconds"),
        ({"agreement": 0}, "agreement"),
        ({"agreement": 1.5}, "agreement"),
        ({"agreement": True}, "agreement"),
        ({"max_window_seconds": 0.4}, "max_window_seconds"),  # not more than a chunk (0.5)
        ({"context_seconds": -1}, "context_seconds"),
        ({"word_margin_seconds": -0.1}, "word_margin_seconds"),
        ({"threshold_db": 0}, "threshold_db"),
        ({"min_pause_seconds": 0}, "min_pause_seconds"),
        ({"keep_before_seconds": -0.1}, "keep_before_seconds"),
    ]:
        with pytest.raises(ValueError, match=name):
            StreamSettings(**bad)
    assert StreamSettings(max_window_seconds=60).capped(30.0).max_window_seconds == 30.0
    assert DEFAULT_STREAM_SETTINGS.capped(None) is DEFAULT_STREAM_SETTINGS
    with pytest.raises(TypeError, match="StreamSettings"):
        Streamer(object(), {"chunk_seconds": 1.0})


def test_local_agreement_counts_the_words_every_hypothesis_shares():
    def words(text):
        return [{"text": t} for t in text.split()]

    assert agreed([words("the cat sat"), words("The cat, sits")]) == 2  # case and punctuation ignored
    assert agreed([words("the cat"), words("the cat sat"), words("a cat")]) == 0
    assert agreed([words("one two")]) == 2 and agreed([]) == 0


def test_pauses_close_the_window_and_the_text_is_the_offline_long_form_text(model):
    """Nothing committed by agreement (agreement 100): every word comes from a decode of audio before
    a pause, or from finish(); those are the offline "segments" cut's windows, so the text is
    `transcribe_waves`' (one window per batch: the same arithmetic)."""
    wave = _bursts((1.0, 0.1), (1.0, 0), (1.0, 0.1))
    stream = Streamer(model, StreamSettings(chunk_seconds=0.8, agreement=100))
    events = []
    for i in range(0, len(wave), int(0.8 * SR)):
        events += stream.feed(wave[i : i + int(0.8 * SR)])
        if stream.seconds >= 2.4:
            # at 1.6 s the pause closed the first burst's window (cut 0.25 s into it, as the offline cut
            # does a pause longer than 0.4 s); its silence was dropped but for the 0.15 s the cut keeps
            # before speech
            assert stream.window_start == pytest.approx(2.0 - 0.15, abs=0.03)
            assert stream.stats["closed"] == 1 and stream.stats["silence_dropped_seconds"] > 0.5
    before_finish = len(events)
    events += stream.finish()
    offline = transcribe_waves(model, [wave], batch_size=1)[0]
    assert offline and stream.text == offline == events[-1].text
    assert events[-1].final and not any(e.final for e in events[:-1])
    assert before_finish == 1 and events[0].seconds == pytest.approx(1.6)  # the first burst, at the pause
    first = [w for w in stream.words if w["start"] is not None]
    # words on the stream's clock: the first window's in the first burst, the last's after the pause
    assert first and all(w["start"] < 1.3 for w in events[0].words)
    assert all(w["start"] >= 1.8 for e in events[1:] for w in e.words if w["start"] is not None)


def test_a_stream_only_adds_and_ends_with_what_it_committed(model):
    """Pieces of uneven sizes, LocalAgreement-2, a window capped at 2 s: every event's text starts
    with the text before it, the deltas join into the text, the words are the text's words."""
    wave = _bursts((2.5, 0.1), (0.6, 0), (1.5, 0.1), (0.4, 0), (1.0, 0.05), seed=9)
    rng = np.random.default_rng(0)
    stream = Streamer(model, StreamSettings(chunk_seconds=0.4, max_window_seconds=2.0))
    windows = []
    events, i = [], 0
    while i < len(wave):
        n = int(rng.uniform(0.05, 0.6) * SR)
        events += stream.feed(wave[i : i + n])
        i += n
        windows.append(stream.seconds - stream.window_start)
    events += stream.finish()
    assert _retractions(events) == 0
    assert "".join(e.delta for e in events) == stream.text == events[-1].text
    assert " ".join(w["text"] for w in stream.words) == stream.text
    assert [w for e in events for w in e.words] == stream.words
    # the cap: a window never holds more than max_window_seconds and one piece
    assert max(windows) <= 2.0 + 0.6 and stream.stats["closed"] >= 2
    assert stream.stats["agreed"] > 0  # words committed by LocalAgreement, not only at pauses
    starts = [w["start"] for w in stream.words if w["start"] is not None]
    assert starts and all(0 <= s <= len(wave) / SR for s in starts)


def test_finish_commits_the_rest_and_ends_the_stream(model):
    wave = _bursts((1.5, 0.1), seed=3)
    stream = Streamer(model, StreamSettings(chunk_seconds=0.5, agreement=100))
    during = stream.feed(wave[:12000])
    assert during == [] and stream.text == ""  # nothing agreed (agreement 100), no pause
    stream.feed(wave[12000:])
    events = stream.finish()
    # the rest committed: one window, its whole answer, as the model says it offline
    assert events[-1].final and stream.text == events[-1].text == model.transcribe([wave])[0] != ""
    with pytest.raises(RuntimeError, match="finished"):
        stream.feed(wave[:100])
    with pytest.raises(RuntimeError, match="finished"):
        stream.finish()
    # a stream that heard nothing ends with nothing
    assert [(e.text, e.final) for e in Streamer(model).finish()] == [("", True)]


def test_streams_decoded_as_one_batch_match_a_stream_alone(model):
    wave = _bursts((1.2, 0.1), (0.6, 0), (0.8, 0.1), seed=11)
    settings = StreamSettings(chunk_seconds=0.6)
    alone = [e.text for e in stream_wave(model, wave, settings, piece_seconds=0.6)]
    pair = [Streamer(model, settings), Streamer(model, settings)]
    step = int(0.6 * SR)
    for i in range(0, len(wave), step):
        feed_many([(s, wave[i : i + step]) for s in pair])
    assert [s.finish()[-1].text for s in pair] == [alone[-1]] * 2
    assert pair[0].stats["decodes"] == pair[1].stats["decodes"] > 0
    other = trained_looking("tiny/whisper", "tiny/qwen3", bf16=False)
    with pytest.raises(ValueError, match="share one model"):
        feed_many([(Streamer(model, settings), wave[:step]), (Streamer(other, settings), wave[:step])])


def test_bad_audio_is_refused_with_a_clear_error(model):
    stream = Streamer(model)
    with pytest.raises(ValueError, match="PCM16"):
        stream.feed(np.zeros(160, np.int16))
    with pytest.raises(ValueError, match="1-D"):
        stream.feed(np.zeros((2, 160), np.float32))
    with pytest.raises(ValueError, match="NaN"):
        stream.feed(np.full(160, np.nan, np.float32))
    assert stream.seconds == 0.0  # nothing of a refused piece was taken


def test_a_pause_closes_the_window_at_once_not_at_the_next_chunk(model):
    """Pieces of 0.1 s, a decode due every 2 s: the sentence's last words are committed when the cut
    sees its pause (0.3 s of silence), long before the chunk is full."""
    wave = _bursts((1.0, 0.1), (0.8, 0), seed=4)
    stream = Streamer(model, StreamSettings(chunk_seconds=2.0, agreement=100))
    events = []
    for i in range(0, len(wave), 1600):
        events += stream.feed(wave[i : i + 1600])
    assert len(events) == 1 and 1.3 <= events[0].seconds <= 1.5 and stream.stats["decodes"] == 1
    # what it committed is the model's answer for the audio before the cut, which is where the window now starts
    cut = int(round(stream.window_start * SR))
    assert 1.0 < stream.window_start < events[0].seconds
    assert events[0].text == model.transcribe([wave[:cut]])[0]


def test_silence_heard_since_the_last_decode_is_not_decoded_again(model):
    """A pause too short yet to close the window (0.38 s, under the 0.4 s the cut keeps around speech):
    the chunks that added only silence run no decode; finish() still decodes the window."""
    wave = _bursts((1.0, 0.1), (0.38, 0), seed=6)
    stream = Streamer(model, StreamSettings(chunk_seconds=0.1, agreement=100))
    for i in range(0, len(wave), 1600):
        stream.feed(wave[i : i + 1600])
    chunks = len(wave) // 1600  # 13 full chunks: 10 of sound, 3 ending in the pause
    assert stream.stats["closed"] == 0 and 10 <= stream.stats["decodes"] <= chunks - 1
    decodes = stream.stats["decodes"]
    assert stream.finish()[-1].text == transcribe_waves(model, [wave], batch_size=1)[0]  # the offline cut
    assert stream.stats["decodes"] == decodes + 1


def test_the_streaming_modules_import_only_numpy_the_standard_library_and_the_long_form_modules():
    """So a model folder can carry them verbatim beside the other long-form modules (speechlm.model.longform)."""
    import ast
    import sys
    from pathlib import Path

    from speechlm.model.longform import stream_settings, streaming

    for module in (streaming, stream_settings):
        for node in ast.walk(ast.parse(Path(module.__file__).read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1 and node.module in ("settings", "cut", "stitch", "stream_settings"), node.module
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for n in [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]:
                    assert n.split(".")[0] in {"numpy", "__future__"} | set(sys.stdlib_module_names), n


def test_agreement_commits_only_words_heard_to_their_end(model):
    """One long burst (no pause), every decode agreeing with itself (agreement 1): a word is committed
    only once its sound ended `word_margin_seconds` before the audio decoded, so none whose sound
    runs on to the window's end (cut off) is committed before finish()."""
    wave = _bursts((2.5, 0.1), (0.2, 0), (0.5, 0.1), seed=8)
    stream = Streamer(model, StreamSettings(chunk_seconds=0.5, agreement=1, word_margin_seconds=0.2))
    events = []
    for i in range(0, len(wave), 8000):
        events += stream.feed(wave[i : i + 8000])
    placed = [(e.seconds, w) for e in events for w in e.words if w["end"] is not None]
    assert placed and all(w["end"] <= seen - 0.2 + 1e-6 for seen, w in placed)
    # with no margin the same stream commits words that run on to the end of what it heard
    eager = Streamer(model, StreamSettings(chunk_seconds=0.5, agreement=1, word_margin_seconds=0.0))
    early = [(e.seconds, w) for i in range(0, len(wave), 8000) for e in eager.feed(wave[i : i + 8000]) for w in e.words]
    assert any(w["end"] is not None and w["end"] > seen - 0.2 for seen, w in early)
