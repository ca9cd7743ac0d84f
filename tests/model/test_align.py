"""Word timestamps from the CTC head (speechlm.model.align): the Viterbi finds the best CTC path (checked
against a search of every path), words group at byte-level BPE and SentencePiece boundaries, times
are in the recording's clock, and a word that can't be placed is reported unplaced."""

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from model_helpers import tiny_config, waves
from speechlm.model import align, build_model, ctc
from speechlm.model.ids import resolve
from speechlm.text import load_tokenizer


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(resolve("tiny/qwen3_5"))


def collapse(labels, blank):
    out, prev = [], None
    for x in labels:
        if x != prev and x != blank:
            out.append(x)
        prev = x
    return out


def path_of(spans, T, blank):
    path = [blank] * T
    for s in spans:
        path[s.start : s.end] = [s.token] * (s.end - s.start)
    return path


@pytest.mark.parametrize("blank", [0, 3])
@pytest.mark.parametrize("target", [[1], [1, 2], [1, 1], [2, 1, 2], []])
def test_viterbi_is_the_best_path(blank, target):
    target = [t if t != blank else 0 for t in target]  # keep the blank out of the targets
    gen = torch.Generator().manual_seed(len(target) * 7 + blank)
    for T in (4, 5, 6):
        lp = torch.randn(T, 4, generator=gen).mul(2).log_softmax(-1)
        best = max(
            (
                sum(lp[t, x].item() for t, x in enumerate(seq))
                for seq in itertools.product(range(4), repeat=T)
                if collapse(seq, blank) == target
            ),
            default=-math.inf,
        )
        spans = align.forced_align(lp, target, blank)
        path = path_of(spans, T, blank)
        assert collapse(path, blank) == target
        assert sum(lp[t, x].item() for t, x in enumerate(path)) == pytest.approx(best, abs=1e-5)
        # one path can't beat the sum over all of them (what F.ctc_loss scores)
        if target:
            nll = F.ctc_loss(lp[:, None], torch.tensor([target]), [T], [len(target)], blank=blank, reduction="sum")
            assert best <= -nll.item() + 1e-5
        for s in spans:  # a token's score is its mean posterior over the frames it is emitted on
            assert s.prob == pytest.approx(lp[s.start : s.end, s.token].exp().mean().item(), abs=1e-6)


def test_batch_equals_one_by_one():
    gen = torch.Generator().manual_seed(0)
    lps = [torch.randn(T, 9, generator=gen).log_softmax(-1) for T in (7, 12, 3, 20)]
    targets = [[1, 2, 3], [4, 4, 5, 6, 1], [7], [8, 1, 1, 2, 3, 3]]
    batch = align.forced_align_batch(lps, targets, blank=0)
    for lp, tg, got in zip(lps, targets, batch):
        assert got == align.forced_align(lp, tg, 0)


def test_too_many_tokens_for_the_frames_is_unplaced(tok):
    ids = align.transcript_ids(tok, "see the red car")
    # a repeated token needs a blank between its copies: [a, a, a] needs 5 frames
    lp = torch.randn(4, 6).log_softmax(-1)
    assert align.forced_align(lp, [1, 1, 1], 0) is None
    assert align.forced_align(torch.randn(5, 6).log_softmax(-1), [1, 1, 1], 0) is not None
    short = torch.randn(len(ids) - 1, len(tok)).log_softmax(-1)
    words = align.align_words(short, ids, tok, 0.08, blank=0)
    assert [w.text for w in words] == ["see", "the", "red", "car"]
    assert all(not w.placed and w.start is None and w.end is None and w.confidence == 0.0 for w in words)
    # a token the head gives probability 0 everywhere: no path, so no made-up time either
    lp = torch.randn(30, len(tok)).log_softmax(-1)
    lp[:, ids[2]] = -math.inf
    assert all(not w.placed for w in align.align_words(lp, ids, tok, 0.08, blank=0))
    assert align.unsupported_share(words, 0.5) == 1.0


def peaked(ids, frames, T, V, blank, p=0.9):
    """Posteriors that emit ids[k] at frames[k] with probability p and blank elsewhere."""
    probs = torch.full((T, V), (1 - p) / (V - 1))
    probs[:, blank] = p
    for k, f in zip(ids, frames):
        probs[f] = (1 - p) / (V - 1)
        probs[f, k] = p
    return probs.log()


def test_words_times_and_confidence(tok):
    text = "John went to Paris yesterday."
    ids = align.transcript_ids(tok, text)
    groups = align.word_groups(tok, ids)
    assert [tok.decode([ids[i] for i in g]).strip() for g in groups] == text.split()
    frames = list(range(2, 2 + 2 * len(ids), 2))  # one token every other frame from frame 2
    lp = peaked(ids, frames, frames[-1] + 3, len(tok), blank=0)
    frame_s = 0.08
    words = align.align_words(lp, ids, tok, frame_s, blank=0, offset=10.0)
    assert [w.text for w in words] == text.split()
    for w, g in zip(words, groups):
        assert w.start == pytest.approx(10.0 + frames[g[0]] * frame_s)
        assert w.end == pytest.approx(10.0 + (frames[g[-1]] + 1) * frame_s)
        assert w.confidence == pytest.approx(0.9, abs=1e-5)
    # a word whose token the head barely supports gets that token's posterior as its confidence
    weak = lp.clone()
    f = frames[groups[3][1]]  # the second token of "Paris"
    weak[f] = torch.full((len(tok),), 0.5 / (len(tok) - 2)).log()
    weak[f, ids[groups[3][1]]] = math.log(0.05)
    weak[f, 0] = math.log(0.45)
    words = align.align_words(weak, ids, tok, frame_s, blank=0)
    assert words[3].confidence == pytest.approx(0.05, abs=1e-4)
    assert align.unsupported_share(words, 0.5) == pytest.approx(1 / 5)
    assert align.unsupported_share(words, 0.01) == 0.0
    assert align.unsupported_share([], 0.5) == 0.0
    with pytest.raises(ValueError, match="threshold"):
        align.unsupported_share(words, 1.5)


def test_word_groups_byte_level_bpe(tok):
    for text, want in [
        ("Did Mary see the red car in 2024?", ["Did", "Mary", "see", "the", "red", "car", "in", "2024?"]),
        ("naïve café  déjà-vu, ok", ["naïve", "café", "déjà-vu,", "ok"]),
        ("hello\nworld", ["hello", "world"]),
    ]:
        ids = align.transcript_ids(tok, text)
        got = [tok.decode([ids[i] for i in g]).strip() for g in align.word_groups(tok, ids)]
        assert got == want


def test_word_groups_sentencepiece():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE(unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Metaspace()
    raw.decoder = decoders.Metaspace()
    raw.train_from_iterator(
        ["the red car went to paris", "mary saw the cat"] * 20,
        trainers.BpeTrainer(vocab_size=60, special_tokens=["<unk>", "<audio>"]),
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>")
    ids = tok("the red cart went", add_special_tokens=False)["input_ids"]
    assert any(p.startswith("▁") for p in tok.convert_ids_to_tokens(ids))
    got = [tok.decode([ids[i] for i in g]).strip() for g in align.word_groups(tok, ids)]
    assert got == ["the", "red", "cart", "went"]


def test_the_aligner_reads_the_ctc_head_as_it_is_trained():
    """The aligner's posteriors over the vocabulary and the blank are the CTC head's log-probabilities
    (one scale, speechlm.model.align.COSINE_SCALE, that both use)."""
    g = torch.Generator().manual_seed(0)
    frames = torch.nn.functional.normalize(torch.randn(7, 16, generator=g), dim=-1)
    rows = torch.randn(11, 16, generator=g)
    blank = torch.nn.functional.normalize(torch.randn(16, generator=g), dim=-1)
    trained = ctc.compact_log_probs(frames, rows, 1 / rows.norm(dim=-1), blank, torch.arange(11))
    read = align.ctc_log_posteriors(frames[None], torch.tensor([7]), torch.cat([rows, blank[None]]))[0]
    torch.testing.assert_close(read, trained, rtol=0, atol=1e-5)  # fp32 sums of 16 terms, x20


@pytest.mark.parametrize("encoder", ["tiny/granite_speech5", "tiny/whisper"])
def test_tiny_twins_give_words_in_the_recordings_clock(encoder):
    torch.manual_seed(0)  # the same twin whatever ran before it on this worker
    model = build_model(tiny_config(encoder=encoder, stride=2))
    clips = waves((32000, 24000), seed=1)
    frame_s = align.frame_seconds(model.family, model.cfg.projector_pool_stride)
    logp = align.clip_posteriors(model, clips)
    for lp, w in zip(logp, clips):
        rows = model._base_lm().get_input_embeddings().weight.shape[0] + 1  # the vocabulary and the blank
        assert lp.shape == (model.family.audio_token_count(len(w), 2), rows) and rows >= len(model.tokenizer)
        assert torch.allclose(lp.exp().sum(-1), torch.ones(lp.shape[0]), atol=1e-4)
        assert abs(lp.shape[0] * frame_s - len(w) / 16000) < 2 * frame_s  # the frames span the clip
    # the posteriors are those the CTC loss trains: the same loss from them as from ctc_loss
    b_ids = [align.transcript_ids(model.tokenizer, t) for t in ("see the red car", "went to Paris")]
    nll = [
        F.ctc_loss(lp[:, None], torch.tensor([i]), [lp.shape[0]], [len(i)], blank=lp.shape[1] - 1).item()
        for lp, i in zip(logp, b_ids)
    ]
    feats, mask = model.features(clips)
    eot = model.tokenizer.convert_tokens_to_ids("<|im_end|>")
    labels = torch.full((2, 12), -100)
    for r, i in enumerate(b_ids):
        labels[r, : len(i) + 1] = torch.tensor(i + [eot])
    with torch.no_grad():
        loss, _ = ctc.ctc_loss(model, feats, mask, labels)
    # the posteriors under bf16 autocast, the loss in training's dtype: they agree to bf16's epsilon
    # (2^-8; 1e-3 failed at 1.4e-3 on a twin initialised from another RNG state, 2026-12-06)
    assert loss.item() == pytest.approx(float(np.mean(nll)), rel=2**-8)
    offsets = [0.0, 5.0]
    words = align.word_timestamps(model, clips, ["see the red car", "went to Paris"], offsets=offsets)
    assert [[w.text for w in ws] for ws in words] == [["see", "the", "red", "car"], ["went", "to", "Paris"]]
    for ws, w, off in zip(words, clips, offsets):
        assert all(wd.placed and 0 <= wd.confidence <= 1 for wd in ws)
        starts = [wd.start for wd in ws]
        assert starts == sorted(starts) and all(wd.start < wd.end for wd in ws)
        assert all(ws[i].end <= ws[i + 1].start for i in range(len(ws) - 1))  # words don't overlap
        assert off <= ws[0].start and ws[-1].end <= off + len(w) / 16000 + frame_s
    assert align.word_timestamps(model, [], []) == []
    with pytest.raises(ValueError, match="2 waves but 1 texts"):
        align.word_timestamps(model, clips, ["x"])


def test_an_export_can_carry_the_module_verbatim():
    import inspect

    from speechlm.model.folder.generate import check_imports

    source = inspect.getsource(align)
    check_imports(source, "speechlm_align.py")  # the standard library, numpy and torch only
    assert "from speechlm" not in source and "from ." not in source
