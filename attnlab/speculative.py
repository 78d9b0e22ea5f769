"""Speculative decoding (chapter 12): a draft proposes, the target checks in one pass.

Greedy decoding runs the target once per token. Speculative decoding (Leviathan et al. 2023,
Chen et al. 2023) lets a cheap **draft** propose k tokens and runs the target once over the
last accepted token and the k proposals, with the chunk mask of chunked prefill
(``attnlab.chunked_prefill.chunk_mask``): the target's greedy choice after every prefix in one
pass. The longest prefix of proposals that equals those choices is accepted
(:func:`accepted_length`), and the target's own choice after it comes for free, so each pass
gives between 1 and k + 1 tokens, always the tokens the target alone would have chosen. The
keys and values of rejected proposals are dropped by moving the cache's ``pos`` back.

Drafts: a smaller GPT with its own cache (:class:`ModelDraft`), or **prompt lookup**
(:func:`prompt_lookup`): the tokens that followed the last n-gram where it occurred earlier in
the context, as Hugging Face's ``generate(..., prompt_lookup_num_tokens=k)`` finds them
(``PromptLookupCandidateGenerator``: the longest n-gram first, up to 2, the first match from the
left).

With sampling, the draft's token x ~ q is kept with probability min(1, p(x)/q(x)) and otherwise
replaced by a draw from the normalized max(0, p - q): the output is distributed as the target's p
(:func:`speculative_sample`, :func:`output_distribution`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .chunked_prefill import check_model, chunk_mask, forward_with_mask
from .gpt import KVCache
from .i18n import tr
from .inputs import describe, whole_number
from .window_cache import lead  # noqa: F401 - chapter 6's lead check, also imported from here by chapter 12


def accepted_length(draft_tokens, target_choices):
    a = 0  # draft_tokens [k]; target_choices [k+1]: the target's pick after the last token and after each proposal
    while a < len(draft_tokens) and draft_tokens[a] == target_choices[a]:
        a += 1
    return a  # proposals 0 .. a-1 are kept; target_choices[a] is the next token


def speculative_step(target, cache, tokens, proposal):
    fed = torch.tensor([tokens[-1:] + proposal], device=cache.k.device)  # [1, 1 + k]: the last token, then the proposals
    logits = forward_with_mask(target, fed, cache, chunk_mask(fed.size(1), cache.pos))[0]  # [1 + k, V]: ONE pass
    choices = logits.argmax(dim=-1).tolist()  # the target's own greedy pick after each prefix
    a = accepted_length(proposal, choices)
    cache.pos -= len(proposal) - a  # drop the keys and values of the rejected proposals
    return proposal[:a] + [choices[a]], logits[:a + 1]  # the new tokens, and the logits that chose them


def prompt_lookup(tokens, num_tokens, max_ngram=2):
    """Up to ``num_tokens`` proposals: what followed the last ``n`` tokens where they occurred
    earlier in ``tokens`` (a list of ids), for n = max_ngram .. 1, the first match from the left."""
    num_tokens, max_ngram = whole_number("num_tokens", num_tokens, low=1), whole_number("max_ngram", max_ngram, low=1)
    tokens = list(tokens)
    for n in range(min(max_ngram, len(tokens) - 1), 0, -1):
        last = tokens[-n:]
        for start in range(len(tokens) - n):  # start + n < len(tokens): something follows the match
            if tokens[start:start + n] == last:
                return tokens[start + n:start + n + num_tokens]
    return []


@dataclass
class SpeculationStats:
    """What a speculative run did: passes, proposals, acceptances, and the closest call."""

    new_tokens: int = 0
    target_passes: int = 0
    draft_passes: int = 0
    proposed: int = 0
    accepted: int = 0
    rejected: int = 0  # passes that rejected a proposal (the first one that differed; the rest were never compared)
    accepted_per_pass: list = field(default_factory=list)
    min_lead: float = math.inf  # the smallest lead of any token chosen (target and draft): rounding can't flip more

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def alpha(self) -> float:
        """The chance that a proposal is accepted when every proposal before it was: accepted over
        the proposals the target compared (accepted ones, and the first rejected one of a pass)."""
        compared = self.accepted + self.rejected
        return self.accepted / compared if compared else 0.0

    @property
    def passes_per_token(self) -> float:
        return self.target_passes / self.new_tokens if self.new_tokens else 0.0

    def note_lead(self, logits: torch.Tensor) -> None:
        self.min_lead = min(self.min_lead, float(lead(logits).min()))


class ModelDraft:
    """A draft GPT that proposes its greedy tokens, with its own KV cache."""

    def __init__(self, model, max_len: int):
        check_model(model)
        self.model = model
        self.cache = KVCache(model.config, 1, whole_number("max_len", max_len, low=1),
                             device=model.token_embedding.weight.device, dtype=model.token_embedding.weight.dtype)

    @torch.no_grad()
    def propose(self, tokens: list[int], k: int, stats: SpeculationStats) -> list[int]:
        self.cache.pos = min(self.cache.pos, len(tokens) - 1)  # drop what it cached for rejected proposals
        device = self.model.token_embedding.weight.device
        feed = torch.tensor([tokens[self.cache.pos:]], device=device)  # [1, n]: what it has not read yet
        proposals = []
        for _ in range(k):
            logits = self.model(feed, cache=self.cache)[0][0, -1]  # [V]
            stats.draft_passes += 1
            stats.note_lead(logits)
            proposals.append(int(logits.argmax()))
            if len(proposals) < k:
                feed = torch.tensor([[proposals[-1]]], device=device)
        return proposals


@torch.no_grad()
def speculative_generate(target, ids, max_new_tokens, k, draft="prompt_lookup"):
    """Greedy decoding of ``target`` from ``ids`` [1, T0], ``k`` proposals per target pass from a
    draft GPT or ``"prompt_lookup"``. Returns the tokens [1, T0 + max_new_tokens] and the stats."""
    check_model(target)
    target.check_idx(ids)
    if ids.size(0) != 1 or ids.size(1) == 0:
        raise ValueError(tr("ch12.err_one_prompt", got=describe(ids)))
    max_new_tokens, k = whole_number("max_new_tokens", max_new_tokens, low=1), whole_number("k", k, low=1)
    total = ids.size(1) + max_new_tokens
    if total > target.config.block_size:
        raise ValueError(tr("ch12.err_room", last=total - 1, block_size=target.config.block_size,
                            room=target.config.block_size - ids.size(1)))
    if isinstance(draft, str):
        if draft != "prompt_lookup":
            raise ValueError(tr("ch12.err_draft", got=repr(draft)))
        proposer = draft
    else:
        check_draft(target, draft, ids.size(1), max_new_tokens)
        proposer = ModelDraft(draft, total)
    device = target.token_embedding.weight.device
    cache = KVCache(target.config, 1, total, device=device, dtype=target.token_embedding.weight.dtype)
    tokens, stats = ids[0].tolist(), SpeculationStats()
    if len(tokens) > 1:  # prefill every prompt token but the last: the first pass feeds it
        forward_with_mask(target, ids[:, :-1], cache, chunk_mask(len(tokens) - 1, 0))
    while len(tokens) < total:
        room = min(k, total - len(tokens) - 1)  # no proposal past the end
        proposal = (prompt_lookup(tokens, room) if isinstance(proposer, str) else proposer.propose(tokens, room, stats)) if room else []
        new, deciding = speculative_step(target, cache, tokens, proposal)
        stats.note_lead(deciding)
        tokens += new
        stats.target_passes += 1
        stats.proposed += len(proposal)
        stats.accepted += len(new) - 1
        stats.rejected += len(new) - 1 < len(proposal)
        stats.accepted_per_pass.append(len(new) - 1)
    stats.new_tokens = max_new_tokens
    return torch.tensor([tokens], device=ids.device), stats


def check_draft(target, draft, prompt_len: int, new_tokens: int) -> None:
    """A draft GPT that reads the target's tokens and has positions for the whole sequence."""
    check_model(draft)
    if draft.config.vocab_size != target.config.vocab_size:
        raise ValueError(tr("ch12.err_vocab", draft=draft.config.vocab_size, target=target.config.vocab_size))
    if prompt_len + new_tokens > draft.config.block_size:
        raise ValueError(tr("ch12.err_room", last=prompt_len + new_tokens - 1, block_size=draft.config.block_size,
                            room=draft.config.block_size - prompt_len))


# ---------------------------------------------------------------------------- sampling


def speculative_sample(p, q, n, generator):
    """``n`` tokens from one speculative step with sampling: a proposal x ~ q, kept with probability
    min(1, p(x) / q(x)), else a draw from max(0, p - q) normalized. p, q [V] (probabilities)."""
    p, q = check_distributions(p, q)
    n = whole_number("n", n, low=1)
    proposals = torch.multinomial(q, n, replacement=True, generator=generator)  # [n]
    keep = torch.rand(n, generator=generator, dtype=p.dtype) < (p[proposals] / q[proposals]).clamp(max=1)
    residual = (p - q).clamp(min=0)
    if residual.sum() == 0:  # p == q: every proposal is kept
        return proposals
    redraws = torch.multinomial(residual / residual.sum(), n, replacement=True, generator=generator)
    return torch.where(keep, proposals, redraws)


def output_distribution(p, q):
    """The exact distribution of :func:`speculative_sample`'s output:
    q(y) min(1, p(y)/q(y)) + (1 - sum_x q(x) min(1, p(x)/q(x))) residual(y), which is p(y)."""
    p, q = check_distributions(p, q)
    kept = torch.minimum(p, q)  # q(y) min(1, p(y)/q(y))
    residual = (p - q).clamp(min=0)
    if residual.sum() == 0:
        return kept
    return kept + (1 - kept.sum()) * residual / residual.sum()


def check_distributions(p, q):
    for name, value in (("p", p), ("q", q)):
        if (not isinstance(value, torch.Tensor) or value.dim() != 1 or not value.is_floating_point()
                or (value < 0).any() or abs(float(value.sum()) - 1) > 1e-6):
            raise ValueError(tr("ch12.err_distribution", name=name, got=describe(value)))
    if p.shape != q.shape:
        raise ValueError(tr("ch12.err_distribution_sizes", p=tuple(p.shape), q=tuple(q.shape)))
    return p.double(), q.double()
