"""Word timestamps from the model's own CTC head: force-align a transcript's tokens to the CTC
posteriors over the decoder's vocabulary (speechlm.model.ctc), then group the tokens into words.

How the pieces plug in (none is wired into transcribe, eval, training or the export yet):
- posteriors: `clip_posteriors(model, waves)` -> per clip a [T_i, V] float32 log-softmax over the
  decoder's vocabulary, exactly the CTC head of `ctc.ctc_loss` (cosine x COSINE_SCALE against the
  input embeddings, then the projector's `ctc_blank` as the last row: the blank).
  `ctc_log_posteriors(proj, lengths, table)` is
  the same from projected frames a caller already has (transcribe computes them for its prompt, so
  the wired route should reuse them instead of running the encoder twice).
- clock: `frame_seconds(model.family, model.cfg.projector_pool_stride)`; frame i covers
  [i * f, (i + 1) * f) s of the clip, plus `offset` (a long-form segment's start in the recording).
- words: `align_words(log_probs, ids, tokenizer, frame_s, blank, offset)` for one clip,
  `align_words_batch(...)` for many (one vectorized Viterbi over the batch);
  `word_timestamps(model, waves, texts, offsets)` does posteriors + ids + alignment for generated
  texts (ids = the transcript's tokens without end-of-turn: the CTC targets `ctc.transcript_targets`
  trains on). Each `Word` has text, start, end (seconds or None when unplaced), confidence in [0, 1].
- hallucination signal: `unsupported_share(words, threshold)` per clip.
- subtitles: `speechlm.subtitles.to_srt / to_vtt (cues(words) or words)`, `to_json(words, text)`,
  `transformers_chunks(words)` (the pipeline's `chunks`); boundary error against a timed shard set's
  `"words"` labels (kind timed; `Clips` batches carry them): `speechlm.scoring.boundaries.score_boundaries(ref,
  hyp)`, summed over clips, `.summary()` for medians and p90s.
This module imports only the standard library, numpy and torch, so an export can carry it verbatim
(speechlm.model.folder.generate.VERBATIM) next to speechlm_text.py.

Why a Viterbi of our own rather than a package: torchaudio's `forced_align` does not import beside
the CPU torch here (shared/README.md). `ctc-forced-aligner` 1.0.2 carries a custom non-OSI licence
with an attribution clause (DOSL) and pulls librosa, onnxruntime and requests. `ctc-segmentation`
1.7.5 (Apache-2.0) ships no wheel (a C build through Cython at install, which an exported model's
clean virtualenv can't be asked for), backtracks in a Python loop per frame, wants a `char_list`, raises
AssertionError when a text has more tokens than frames, and scores a "stay" as max(blank, token): an
utterance segmenter, not a CTC forced aligner. The CTC Viterbi below is ~60 lines of tensor code,
vectorized over clips and states, and checked in tests against a brute-force search of all paths.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

# the CTC head's scale: its logits are COSINE_SCALE x cosine (speechlm.model.ctc trains it; this
# module imports no sibling so that an export can carry it alone)
COSINE_SCALE = 20.0  # logits = 20 x cosine: a confident frame can beat ~50k other tokens
# a word starts at a token whose text starts with one of these: byte-level BPE's space and newline
# (GPT-2, SmolLM2, Qwen, Llama 3), SentencePiece's meta space, or a plain space/newline
BOUNDARY_MARKS = ("Ġ", "Ċ", "▁", " ", "\n", "\t")


@dataclass
class Word:
    text: str
    start: float | None  # seconds in the recording's clock; None: the aligner could not place it
    end: float | None
    confidence: float  # the CTC head's support, in [0, 1]: min over its tokens of their mean posterior

    @property
    def placed(self) -> bool:
        return self.start is not None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class TokenSpan:
    token: int
    start: int  # first frame the Viterbi path emits the token on
    end: int  # one past its last frame
    prob: float  # mean posterior of the token over those frames


# --------------------------------------------------------------------------- posteriors and clock


def ctc_log_posteriors(proj: torch.Tensor, lengths: torch.Tensor, table: torch.Tensor, scale: float = COSINE_SCALE):
    """Per clip a [T_i, V] float32 log-softmax: projected frames [B, L, H] against the decoder's input
    embedding table [V, H] by cosine x scale, as the CTC head is trained."""
    table = F.normalize(table.detach().float(), dim=-1)
    logits = scale * F.normalize(proj.detach().float(), dim=-1) @ table.T
    logp = logits.log_softmax(-1)
    return [logp[i, : int(n)] for i, n in enumerate(lengths.tolist())]


def frame_seconds(family, pool_stride: int) -> float:
    """Seconds of audio per projected frame: the feature frame rate, the encoder's time subsampling
    (its conv layers' strides) and the projector's pooling."""
    stride = math.prod(int(s) for _, _, s in family.conv_layers()) * int(pool_stride)
    return stride / float(family.features.frames_per_second)


@torch.no_grad()
def clip_posteriors(model, waves: list, scale: float = COSINE_SCALE) -> list[torch.Tensor]:
    """Per 16 kHz wave, the CTC head's [T_i, V] log-posteriors (on CPU) of a SpeechLM."""
    device = next(model.projector.parameters()).device
    feats, mask = model.features(waves)
    was_training = model.training
    model.eval()
    try:
        with model._autocast(device):
            proj, lengths = model.encode_audio(feats.to(device), mask.to(device))
    finally:
        model.train(was_training)
    # the decoder's input embeddings, then the projector's CTC blank as the last row (speechlm.model.ctc)
    emb = model._base_lm().get_input_embeddings().weight.detach().float()
    table = torch.cat([emb, model.projector.ctc_blank.detach().float()[None]])
    return [lp.cpu() for lp in ctc_log_posteriors(proj, lengths, table, scale)]


# --------------------------------------------------------------------------- Viterbi


@torch.no_grad()
def forced_align_batch(log_probs: list[torch.Tensor], targets: list[list[int]], blank: int) -> list:
    """The most likely CTC path of each clip's targets through its [T_i, V] log-probs: per clip a list
    of TokenSpan (one per target, in order), or None when no path exists (more tokens than frames
    allow, or every path has probability 0)."""
    if len(log_probs) != len(targets):
        raise ValueError(f"{len(log_probs)} posteriors but {len(targets)} target rows")
    if not log_probs:
        return []
    B = len(log_probs)
    T = max(max(int(lp.shape[0]) for lp in log_probs), 1)
    S = 2 * max((len(t) for t in targets), default=0) + 1
    ext = np.full((B, S), blank, dtype=np.int64)
    em = np.full((B, T, S), -np.inf, dtype=np.float32)  # each state's log-prob per frame
    lengths = np.array([int(lp.shape[0]) for lp in log_probs])
    for b, (lp, tg) in enumerate(zip(log_probs, targets)):
        ext[b, 1 : 2 * len(tg) : 2] = tg
        if lengths[b]:  # gather where the posteriors are: [T, S] leaves the device, not [T, V]
            index = torch.from_numpy(ext[b]).to(lp.device)[None].expand(lengths[b], S)
            em[b, : lengths[b]] = lp.float().gather(1, index).cpu().numpy()
    # a skip over a blank is allowed into a token unless it repeats the token two states back
    skip = np.zeros((B, S), dtype=bool)
    skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
    # small arrays and T steps: numpy's per-call cost is a fraction of torch's here
    alpha = np.full((B, S), -np.inf, dtype=np.float32)
    alpha[:, :2] = em[:, 0, :2]
    back = np.zeros((B, T, S), dtype=np.uint8)  # 0: stay, 1: from s-1, 2: from s-2
    cand = np.full((3, B, S), -np.inf, dtype=np.float32)
    live = np.arange(T)[None, :] < lengths[:, None]
    with np.errstate(invalid="ignore"):  # -inf + -inf is -inf; nothing here is +inf
        for t in range(1, T):
            cand[0] = alpha
            cand[1, :, 1:] = alpha[:, :-1]
            cand[2, :, 2:] = alpha[:, :-2]
            cand[2][~skip] = -np.inf
            arg, best = cand.argmax(0), cand.max(0)
            # a shorter clip's scores stay as at its last frame
            alpha = np.where(live[:, t : t + 1], best + em[:, t], alpha)
            back[:, t] = arg
    return _backtrack(alpha, back, em, lengths, targets)


def _backtrack(alpha, back, em, lengths, targets) -> list:
    B, T, _ = back.shape
    n_tok = np.array([len(t) for t in targets])
    ends = np.stack([2 * n_tok, np.maximum(2 * n_tok - 1, 0)], 1)  # the final blank or the final token
    end_scores = np.take_along_axis(alpha, ends, 1)
    state = ends[np.arange(B), end_scores.argmax(1)]
    ok = np.isfinite(end_scores.max(1)) & (lengths > 0)
    path = np.full((B, T), -1, dtype=np.int64)
    rows = np.arange(B)
    for t in range(T - 1, -1, -1):
        live = t < lengths
        path[live, t] = state[live]
        if t:
            state = np.where(live, state - back[rows, t, state], state)
    probs = np.exp(np.take_along_axis(em, np.maximum(path, 0)[..., None], 2)[..., 0])
    out = []
    for b in range(B):
        if not ok[b]:
            out.append(None if len(targets[b]) else [])
            continue
        p, pr = path[b, : lengths[b]], probs[b, : lengths[b]]
        emit = p % 2 == 1  # frames that emit a token: state 2k + 1 emits token k
        k = (p[emit] - 1) // 2  # non-decreasing along a path, and every token appears at least once
        frames = np.flatnonzero(emit)
        n = len(targets[b])
        first = np.searchsorted(k, np.arange(n), "left")
        last = np.searchsorted(k, np.arange(n), "right") - 1
        mean = np.bincount(k, weights=pr[emit], minlength=n) / np.bincount(k, minlength=n)
        out.append(
            [
                TokenSpan(int(tok), int(frames[f]), int(frames[g]) + 1, float(m))
                for tok, f, g, m in zip(targets[b], first, last, mean)
            ]
        )
    return out


def forced_align(log_probs: torch.Tensor, target: list[int], blank: int):
    """One clip: TokenSpans of `target` through [T, V] log-probs, or None when it can't be placed."""
    return forced_align_batch([log_probs], [list(target)], blank)[0]


# --------------------------------------------------------------------------- words


def word_groups(tokenizer, ids: list[int]) -> list[list[int]]:
    """Positions of `ids` grouped into words: a word starts at a token whose text starts with a space
    or newline (byte-level BPE 'Ġ'/'Ċ', SentencePiece '▁'), except that a token that is only such a
    mark (a space before digits, say) starts a word the next token continues."""
    pieces = tokenizer.convert_ids_to_tokens(list(ids))
    groups: list[list[int]] = []
    blank_so_far = False  # the open word holds only boundary marks so far
    for i, piece in enumerate(pieces):
        piece = piece or ""
        starts = piece.startswith(BOUNDARY_MARKS)
        if not groups or (starts and not blank_so_far):
            groups.append([i])
            blank_so_far = not piece.lstrip("".join(BOUNDARY_MARKS))
        else:
            groups[-1].append(i)
            blank_so_far = blank_so_far and not piece.lstrip("".join(BOUNDARY_MARKS))
    return groups


def words_from_spans(tokenizer, ids: list[int], spans, frame_s: float, offset: float = 0.0) -> list[Word]:
    """Words of `ids` with their times from TokenSpans (None: every word unplaced, confidence 0)."""
    words = []
    for g in word_groups(tokenizer, ids):
        text = tokenizer.decode([ids[i] for i in g], skip_special_tokens=True).strip()
        if not text:
            continue
        if spans is None:
            words.append(Word(text, None, None, 0.0))
            continue
        start, end = spans[g[0]].start, spans[g[-1]].end
        conf = min(spans[i].prob for i in g)
        words.append(Word(text, round(offset + start * frame_s, 4), round(offset + end * frame_s, 4), conf))
    return words


def align_words(
    log_probs: torch.Tensor, ids: list[int], tokenizer, frame_s: float, blank: int, offset: float = 0.0
) -> list[Word]:
    """One clip's words with start/end (seconds, + offset) and confidence, from its CTC log-probs."""
    return align_words_batch([log_probs], [ids], tokenizer, frame_s, blank, [offset])[0]


def align_words_batch(
    log_probs: list[torch.Tensor], ids: list[list[int]], tokenizer, frame_s: float, blank: int, offsets=None
) -> list[list[Word]]:
    """Many clips at once: one Viterbi over the batch, then words per clip."""
    offsets = [0.0] * len(ids) if offsets is None else list(offsets)
    if len(offsets) != len(ids):
        raise ValueError(f"{len(offsets)} offsets for {len(ids)} clips")
    ids = [[int(i) for i in row] for row in ids]
    if any(blank in row for row in ids):
        raise ValueError(f"a transcript holds the blank id {blank} (the CTC blank): it can't be aligned")
    spans = forced_align_batch(log_probs, ids, blank)
    return [words_from_spans(tokenizer, row, sp, frame_s, off) for row, sp, off in zip(ids, spans, offsets)]


def transcript_ids(tokenizer, text: str) -> list[int]:
    """The tokens CTC aligns for a transcript: its tokens without the end-of-turn (ctc.transcript_targets)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def word_timestamps(model, waves: list, texts: list[str], offsets=None, scale: float = COSINE_SCALE):
    """Words with times for generated `texts` of `waves` (16 kHz) from a SpeechLM's own CTC head."""
    if len(waves) != len(texts):
        raise ValueError(f"{len(waves)} waves but {len(texts)} texts")
    if not waves:
        return []
    logp = clip_posteriors(model, waves, scale)
    ids = [transcript_ids(model.tokenizer, t) for t in texts]
    frame_s = frame_seconds(model.family, model.cfg.projector_pool_stride)
    blank = model._base_lm().get_input_embeddings().num_embeddings  # the row after the vocabulary
    return align_words_batch(logp, ids, model.tokenizer, frame_s, blank, offsets)


# --------------------------------------------------------------------------- hallucination signal


def unsupported_share(words: list[Word], threshold: float) -> float:
    """Share of a clip's words the CTC head does not support: confidence below `threshold` (an
    unplaced word has confidence 0, so it counts). 0.0 for a clip with no words."""
    if not 0 <= threshold <= 1:
        raise ValueError(f"threshold: must be in [0, 1], got {threshold}")
    if not words:
        return 0.0
    return sum(w.confidence < threshold for w in words) / len(words)
