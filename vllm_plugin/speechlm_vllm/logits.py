"""The engine half of speechlm's stop rules (stops.py): a vLLM logits processor that ends a request with
the end-of-turn token once it has its token budget or its new tokens end in a loop.

Registered in the `vllm.logits_processors` entry-point group, vLLM builds one per engine whatever the
model; for a model that is not a speechlm folder it tracks nothing and leaves the logits alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

from . import stops
from .folder import is_speechlm_folder, load


@dataclass
class _Request:
    budget: int
    output: list[int]  # vLLM's running list of the request's new tokens (a live reference)


class SpeechLMStops(LogitsProcessor):
    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool):
        path = vllm_config.model_config.model
        self.folder = load(path) if is_speechlm_folder(path) else None
        self.requests: dict[int, _Request] = {}
        self.ending: list[int] = []  # batch rows whose next token must be end-of-turn

    def is_argmax_invariant(self) -> bool:
        return False  # it changes which token greedy decoding picks

    def _new(self, params, prompt_ids, output_ids) -> _Request | None:
        extra = params.extra_args or {}
        if stops.EXTRA_KEY in extra:
            return _Request(int(extra[stops.EXTRA_KEY]), output_ids)
        if prompt_ids is None:
            return None
        n_audio = sum(1 for t in prompt_ids if t == self.folder.audio_token_id)
        if n_audio == 0:
            return None  # a text-only request: speechlm's rules are for clips
        language, given = self.folder.pinned(list(prompt_ids))
        return _Request(stops.budget_for_placeholders(self.folder, n_audio, language, given), output_ids)

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if self.folder is None:
            return
        process_dict_updates(self.requests, batch_update, self._new)
        self.ending = [
            row
            for row, r in self.requests.items()
            if r.output and (len(r.output) >= r.budget or stops.loops_now(self.folder, r.output))
        ]

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if self.ending:
            eot = self.folder.end_of_turn_id
            rows = torch.tensor(self.ending, device=logits.device)
            keep = logits[rows, eot].clone()
            logits[rows] = float("-inf")
            logits[rows, eot] = torch.where(torch.isinf(keep), torch.zeros_like(keep), keep)
        return logits
