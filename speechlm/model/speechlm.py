"""SpeechLM: frozen audio encoder (any family in speechlm.model.encoders) -> projector -> (LoRA) causal LM decoder.

The modelling layer: this module imports torch, numpy, transformers (through speechlm.text) and its
siblings only. Loading, building and saving live in the builders (build.py, parts.py, io.py).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from transformers import StoppingCriteriaList

from speechlm import text
from speechlm.audio_checks import SAMPLE_RATE

from . import align, generation, parameters
from .loss import ChunkedCrossEntropy, TokenLoss
from .projector import Projector, pooled_length
from .prompting import Prompting

log = logging.getLogger(__name__)

# the dtypes a config and a model folder name (model.model_dtype, model.projector_dtype, config.json's dtype)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Output:
    loss: torch.Tensor  # weighted mean token CE over label positions
    num_tokens: torch.Tensor  # weighted count of label tokens (sum of clip weights over tokens)


class SpeechLM(Prompting, nn.Module):
    def __init__(
        self,
        cfg,
        encoder,
        projector: Projector,
        decoder,
        tokenizer,
        family,
        trainable: dict,
        bf16: bool = True,
        loss: TokenLoss | None = None,
        ctc_weight: float = 0.0,
    ):
        super().__init__()
        self.cfg = cfg
        self.encoder = encoder
        self.projector = projector
        self.decoder = decoder  # a PeftModel when LoRA is on
        self.tokenizer = tokenizer
        self.family = family  # the encoder's family: features, frame arithmetic, frozen-mode rules
        self.trainable = dict(trainable)  # part -> bool: encoder, projector, decoder, embed_tokens, lora
        # None only in a shapes-only build on the meta device (speechlm.model.meta), which never runs
        self.audio_token_id = text.audio_token_id(tokenizer, cfg.audio_token) if tokenizer is not None else None
        self.bf16 = bf16
        self.loss = loss or ChunkedCrossEntropy()  # training.loss: per-token losses over label positions
        self.ctc_weight = ctc_weight  # training.ctc_weight: the CTC head's auxiliary loss in training steps
        self.calibration: dict | None = None
        # training.encoder_cache_gb: the frozen encoder's output per clip, reused (speechlm.model.encoder_cache)
        self.encoder_cache = None
        self.train(False)

    # ------------------------------------------------------------------ modes
    @property
    def features(self):
        """The encoder family's feature extractor: waves -> (input_features, feature_mask)."""
        return self.family.features

    def train(self, mode: bool = True):
        super().train(mode)
        # the family decides: e.g. Granite's BatchNorm stays in eval mode always (pitfall 12)
        self.family.set_mode(self.encoder, mode, self.trainable.get("encoder", False))
        return self

    def _base_lm(self):
        return self.decoder.get_base_model() if hasattr(self.decoder, "get_base_model") else self.decoder

    def _autocast(self, device: torch.device):
        # bf16 compute; parameters keep their storage dtype (trainable ones fp32)
        if not self.bf16:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)

    # ------------------------------------------------------------------ audio
    def audio_lengths(self, feature_mask: torch.Tensor) -> torch.Tensor:
        """Per clip, how many embeddings the projector emits (= the number of `<audio>` tokens)."""
        frames = self.family.encoder_frames(feature_mask.long().sum(-1))
        return pooled_length(frames, self.cfg.projector_pool_stride).clamp_min(0)

    def encode_audio(self, input_features: torch.Tensor, feature_mask: torch.Tensor):
        """-> (projected [B, L', H], lengths [B]) with lengths what the projector emits per clip."""
        grad = self.trainable.get("encoder", False) and torch.is_grad_enabled()
        with torch.set_grad_enabled(grad):
            enc_dtype = next(self.encoder.parameters()).dtype
            feats = input_features.to(enc_dtype)
            if self.encoder_cache is not None and not grad:
                hidden, frames = self.encoder_cache.encode(self._run_encoder, feats, feature_mask)
            else:
                hidden, frames = self._run_encoder(feats, feature_mask)
        proj = self.projector(hidden)
        lengths = pooled_length(frames, self.cfg.projector_pool_stride).clamp_min(0)
        expected = self.audio_lengths(feature_mask)
        if not torch.equal(lengths.cpu(), expected.cpu()):
            raise RuntimeError(
                f"the {self.family.name} encoder emits {lengths.tolist()} audio embeddings per clip but its family's "
                f"frame arithmetic (conv layers {self.family.conv_layers()}) predicts {expected.tolist()}"
            )
        return proj, lengths

    def _run_encoder(self, input_features: torch.Tensor, feature_mask: torch.Tensor):
        return self.family.encode(self.encoder, input_features, feature_mask)

    def embed(self, input_ids, input_features, feature_mask, projected=None) -> torch.Tensor:
        """Text embeddings with the audio placeholders replaced by projected audio (`projected`: the
        (projected, lengths) of encode_audio when the caller has them already)."""
        is_audio = input_ids == self.audio_token_id
        # `<audio>` has no embedding row of its own (the decoder's vocabulary stays its base model's):
        # its places are looked up as id 0 and then overwritten with the projected audio
        embeds = self._base_lm().get_input_embeddings()(input_ids.masked_fill(is_audio, 0))
        proj, lengths = projected if projected is not None else self.encode_audio(input_features, feature_mask)
        placeholders = is_audio.sum(-1)
        if not torch.equal(placeholders.cpu(), lengths.cpu()):
            raise ValueError(
                f"each clip needs exactly as many {self.cfg.audio_token} tokens as the projector emits: "
                f"input_ids hold {placeholders.tolist()}, audio gives {lengths.tolist()} "
                "(count them with the encoder family's audio_token_count)"
            )
        valid = torch.arange(proj.shape[1], device=proj.device)[None, :] < lengths[:, None]
        audio = proj[valid].to(embeds.dtype)  # clip-major, time order: the order of the placeholders
        return embeds.masked_scatter(is_audio.unsqueeze(-1), audio)

    # ------------------------------------------------------------------ training forward
    def label_hidden(self, input_features, feature_mask, input_ids, attention_mask, labels, projected=None):
        """Decoder states only where there is a label: (hidden [N, H], targets [N], row of each [N]).

        Position t predicts labels[t + 1]; selecting those positions before the LM head makes
        logits memory scale with transcript tokens, not sequence length x vocabulary.
        """
        with self._autocast(input_ids.device):
            embeds = self.embed(input_ids, input_features, feature_mask, projected)
            hidden = self._base_lm().get_decoder()(
                inputs_embeds=embeds, attention_mask=attention_mask, use_cache=False
            )[0]
        targets = labels[:, 1:]
        sel = targets != -100
        rows = torch.arange(labels.shape[0], device=labels.device)[:, None].expand_as(targets)[sel]
        return hidden[:, :-1][sel], targets[sel], rows

    def label_logits(self, input_features, feature_mask, input_ids, attention_mask, labels):
        """Logits only where there is a label: (logits [N, V], targets [N], row of each [N])."""
        hidden, targets, rows = self.label_hidden(input_features, feature_mask, input_ids, attention_mask, labels)
        with self._autocast(input_ids.device):
            logits = self._base_lm().get_output_embeddings()(hidden)
        return logits, targets, rows

    def forward(
        self,
        input_features,
        feature_mask,
        input_ids,
        attention_mask,
        labels,
        weight=None,
        objective: str = "lm",
        ctc_labels=None,
        **_,
    ) -> Output:
        """`ctc_labels` (the collator's, where a clip's answer is not what was said): what the CTC head aligns."""
        ctc_labels = labels if ctc_labels is None else ctc_labels
        if objective == "ctc":  # the projector warm start: no decoder forward (speechlm.model.ctc)
            from .ctc import ctc_loss  # training only: it may gather ZeRO-3 weights with deepspeed

            loss, num = ctc_loss(self, input_features, feature_mask, ctc_labels, weight)
            return Output(loss=loss, num_tokens=num)
        # training steps also teach the CTC head (training.ctc_weight), on the frames the LM step projects
        aux = self.training and self.ctc_weight > 0
        projected, ctc = None, 0.0
        if aux:
            from .ctc import projected_ctc_loss  # training only, as above

            with self._autocast(input_ids.device):
                projected = self.encode_audio(input_features, feature_mask)
            # before the decoder: under ZeRO-3 the head's gather of the embedding table must end before
            # the tied LM head holds that table (freeing a parameter a module still holds is an error)
            ctc = self.ctc_weight * projected_ctc_loss(self, *projected, ctc_labels, weight)[0]
        hidden, targets, rows = self.label_hidden(
            input_features, feature_mask, input_ids, attention_mask, labels, projected
        )
        with self._autocast(input_ids.device):
            ce = self.loss(self._base_lm().get_output_embeddings(), hidden, targets)
        if weight is None:
            weight = torch.ones(labels.shape[0], device=ce.device)
        w = weight.to(ce.device, torch.float32)[rows]
        num = w.sum()
        # an all-padding batch (weights 0) still runs every module and returns a zero loss with a graph
        loss = (ce * w).sum() / num if num > 0 else (ce * w).sum()
        loss = loss + ctc
        return Output(loss=loss, num_tokens=num.detach())

    # ------------------------------------------------------------------ inference
    @torch.no_grad()
    def transcribe(
        self,
        waves: list[np.ndarray],
        max_new_tokens: int | None = None,
        num_beams: int = 1,
        details: bool = False,
        timestamps: bool = False,
        prefixes: list[str | list[int]] | None = None,
        language: str | None | list[str | None] = None,
        task: str | list[str] = "transcribe",
        context: str | None | list[str | None] = None,
    ) -> list:
        """Texts for 16 kHz waves. With `details`, dicts that also say whether the token budget or the
        loop rule stopped each clip (speechlm.model.generation); with `timestamps`, dicts whose "words"
        give each word's start and end (seconds in the clip) and confidence, force-aligned on the CTC
        head over the very frames the prompt was built from (speechlm.model.align).

        `prefixes`: per clip, text the answer starts with (a live transcript's committed words), or its
        token ids: the assistant turn opens with its tokens (text tokenized as training tokenizes a
        transcript) and the model goes on after them. The text returned is the whole answer, prefix
        included, and so are the "words" and "ids" (the answer's token ids, up to end-of-turn); "tokens"
        counts the new ones. The prefix spends the clip's token budget and takes part in the loop rule
        (`generation.token_budget`, `generation.LoopStop`). `language`, `task` and `context` (OpenAI's
        prompt), for all clips or per clip: see `_asked`."""
        langs, given, instructions = self._asked(len(waves), prefixes, language, task, context)
        device = next(self.projector.parameters()).device
        feats, mask = self.features(waves)
        feats, mask = feats.to(device), mask.to(device)
        eot, pad = text.end_of_turn_id(self.tokenizer), self.tokenizer.pad_token_id
        was_training = self.training
        # a switch walks every module (~5% of a short window's decode, which live streams run often)
        switch = was_training or any(m.training for m in self.modules())
        if switch:
            self.eval()
        try:
            with self._autocast(device):
                projected = self.encode_audio(feats, mask)
                how = (max_new_tokens, num_beams, eot, langs)
                rows, stops = self._generate(waves, feats, mask, projected, how, given, instructions)
        finally:
            if switch:
                self.train(was_training)
        out = self._answers(rows, stops, given, (eot, pad), langs)
        if not (details or timestamps):
            return [o["text"] for o in out]
        if timestamps:
            answers = [o["ids"] for o in out]
            for o, words in zip(out, self.word_times(projected, answers)):
                o["words"] = words
        return out

    def _answers(self, rows, stops, given, ends, langs=None) -> list[dict]:
        """Each clip's answer from its generated rows: the loop rule's cut applied, up to the first
        end-of-turn or pad token (`ends`), after its prefix ids; text, ids, new tokens and stop flags;
        a model that opens its answers with the language: that opening read off (`langs`: the pinned)."""
        cut = stops[1].cut if len(stops) > 1 else [None] * len(rows)
        hit = stops[0].hit if stops else [False] * len(rows)
        kept = [row[:c] if c is not None else row for row, c in zip(rows, cut)]
        n_new = [next((i for i, tok in enumerate(row) if tok in ends), len(row)) for row in kept]
        answers = [g + row[:n] for g, row, n in zip(given, kept, n_new)]
        out = [
            {
                "text": self.tokenizer.decode(a, skip_special_tokens=True).strip(),
                "ids": a,
                "tokens": n,
                "capped": h,
                "loop": c is not None,
            }
            for a, n, h, c in zip(answers, n_new, hit, cut)
        ]
        if getattr(self.cfg, "answer_language", False):
            out = [self._language_opened(o, lang) for o, lang in zip(out, langs or [None] * len(out))]
        return out

    def _generate(self, waves, feats, mask, projected, how, given, instructions) -> tuple[list, list]:
        """(new token rows, the stopping rules that ran): greedy or beam generation (`how`: max new tokens,
        beams, end-of-turn id, the clips' languages) after each clip's prompt (its instruction) and the
        answer tokens `given` for it (a prefix, often none)."""
        max_new_tokens, num_beams, eot, langs = how
        prompts = [
            text.prompt_ids(self.tokenizer, n, instruction, self.cfg.audio_token, self.cfg.system_prompt) + g
            for n, g, instruction in zip(projected[1].tolist(), given, instructions)
        ]
        budgets = generation.token_budget(
            [len(w) / SAMPLE_RATE for w in waves],
            self.token_rates(langs),
            self.cfg.new_tokens_margin,
            max_new_tokens or self.cfg.max_new_tokens,
            [len(g) for g in given],
        )
        # per-row rules see rows, so they run with greedy search; beams get the largest budget
        stops = [generation.TokenBudget(budgets, eot)] if num_beams == 1 else []
        if self.cfg.loop_max_ngram > 0 and num_beams == 1:
            loop = generation.LoopStop(
                len(waves), self.cfg.loop_max_ngram, self.cfg.loop_min_repeats, eot, prefixes=given
            )
            stops.append(loop)
        width = max(map(len, prompts))
        pad = self.tokenizer.pad_token_id
        # left padding so every row's generation starts right after its prompt
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=feats.device)
        attn = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=feats.device)
        out = self.decoder.generate(
            inputs_embeds=self.embed(ids, feats, mask, projected),
            attention_mask=attn,
            max_new_tokens=max(budgets),
            num_beams=num_beams,
            do_sample=False,
            eos_token_id=eot,
            pad_token_id=pad,
            stopping_criteria=StoppingCriteriaList(stops),
        )
        return out.tolist(), stops  # with inputs_embeds only, generate returns just the new tokens

    def word_times(self, projected, token_rows: list[list[int]]) -> list[list[dict]]:
        """Per clip, the words of its generated tokens with {"text", "start", "end", "confidence"}: the
        tokens force-aligned on the CTC head's posteriors over `projected` frames (speechlm.model.align)."""
        proj, lengths = projected
        rows = self._base_lm().get_input_embeddings().weight.detach()
        # cosines against the table in its own dtype, scaled by the rows' inverse norms: no normalized copy
        # of the table per batch (its cost would be a tenth of a batch's transcription on the demo)
        inv_norm = 1.0 / torch.linalg.vector_norm(rows, dim=-1, dtype=torch.float32).clamp_min(1e-12)
        unit = torch.nn.functional.normalize(proj.float(), dim=-1)
        blank = torch.nn.functional.normalize(self.projector.ctc_blank.float(), dim=-1)
        logp = []
        for u, n in zip(unit, lengths.tolist()):
            cos = torch.cat([(u[:n].to(rows.dtype) @ rows.T).float() * inv_norm, (u[:n] @ blank)[:, None]], -1)
            logp.append((align.COSINE_SCALE * cos).log_softmax(-1).cpu())
        special = set(self.tokenizer.all_special_ids)
        ids = [[t for t in row if t not in special] for row in token_rows]
        frame_s = align.frame_seconds(self.family, self.cfg.projector_pool_stride)
        words = align.align_words_batch(logp, ids, self.tokenizer, frame_s, rows.shape[0])
        return [[w.to_dict() for w in clip] for clip in words]

    # ------------------------------------------------------------------ optimizer and reporting
    def parameter_groups(self, tcfg) -> list[dict]:
        return parameters.groups(self, tcfg)

    def parameter_counts(self) -> dict[str, tuple[int, int]]:
        return parameters.counts(self)

    def parameter_table(self) -> str:
        return parameters.format_table(parameters.counts(self), parameters.dtypes(self))
