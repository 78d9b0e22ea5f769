"""Exercise 10, task 1: the adapter of a Hugging Face model with left padding."""

from __future__ import annotations

import torch

from ...causality import eval_mode
from ...grader import Case, Contract, Problem, Task, compare_outputs, same_output, watched_models
from .models import ATOL, EXERCISE, VOCAB, build

# --------------------------------------------------------------------------
# 1. padded_logits(model, ids, pad) -> [B, T, V]: ids [B, T] after `pad` padding tokens (token 0)
#    on the LEFT, blocked by an attention_mask; the logits of the real tokens; model in eval mode


def padded_logits(model, ids, pad):
    B, T = ids.shape
    full = torch.cat([torch.zeros(B, pad, dtype=ids.dtype), ids], dim=1)  # [B, pad + T]: padding first
    mask = torch.cat([torch.zeros(B, pad, dtype=torch.long), torch.ones(B, T, dtype=torch.long)], dim=1)
    with eval_mode(model):
        logits = model(input_ids=full, attention_mask=mask).logits  # [B, pad + T, V]
    return logits[:, pad:]  # the real tokens


ADAPTER_CASES = [  # (name, implementation, training, B, T, pad); GPT-2 has learned absolute positions
    ("gpt2", "eager", True, 2, 5, 3), ("gpt2", "sdpa", False, 1, 7, 2), ("llama", "sdpa", False, 2, 6, 4),
    ("mistral", "eager", True, 1, 8, 1), ("gpt2", "sdpa", True, 3, 4, 2),
]


def adapter_cases(generator):
    cases = []
    for seed, (name, impl, training, B, T, pad) in enumerate(ADAPTER_CASES):
        ids = torch.randint(1, 128, (B, T), generator=generator)
        cases.append(Case(((name, impl, seed, training), ids, pad),
                          label=f"{name} {impl}{', train()' if training else ''}, B={B}, T={T}, pad={pad}"))
    return cases


def generate_positions(mask):
    """The position ids generate() passes with a padded batch: the real tokens counted from 0."""
    return (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)


def _call_adapter(fn, spec, ids, pad):
    """The learner's adapter on a fresh model. Position ids passed as generate() passes them (the real
    tokens counted from 0) are right too: logits that match that reading count as the reference's."""
    model = build(spec)
    passed = []
    hook = model.register_forward_pre_hook(
        lambda module, args, kwargs: passed.append(kwargs.get("position_ids") is not None), with_kwargs=True)
    try:
        with watched_models(model):
            got = fn(model, ids, pad)
    finally:
        hook.remove()
    if any(passed) and isinstance(got, torch.Tensor) and got.shape == (*ids.shape, model.config.vocab_size):
        B, T = ids.shape
        full = torch.cat([torch.zeros(B, pad, dtype=ids.dtype), ids], dim=1)
        mask = torch.cat([torch.zeros(B, pad, dtype=torch.long), torch.ones(B, T, dtype=torch.long)], dim=1)
        with eval_mode(model), torch.no_grad():
            counted = model(input_ids=full, attention_mask=mask, position_ids=generate_positions(mask)).logits[:, pad:]
            if same_output(got.detach().to(counted.device), counted, atol=ATOL):
                return padded_logits(model, ids, pad)  # the same answer, read with the positions the task's reference uses
    return got


def _adapter_mutant(side="left", mask="right", keep="real", train_mode=False):
    def adapter(model, ids, pad):
        B, T = ids.shape
        pads = torch.zeros(B, pad, dtype=ids.dtype)
        full = torch.cat([pads, ids] if side == "left" else [ids, pads], dim=1)
        ones, zeros = torch.ones(B, T, dtype=torch.long), torch.zeros(B, pad, dtype=torch.long)
        attention = {"right": torch.cat([zeros, ones] if side == "left" else [ones, zeros], dim=1),
                     "none": None, "inverted": torch.cat([1 - zeros, 1 - ones], dim=1)}[mask]
        if not train_mode:
            model.eval()
        logits = model(input_ids=full, attention_mask=attention).logits
        return logits[:, pad:] if keep == "real" else logits[:, :T]

    return adapter


def _adapter_with_pad_function(model, ids, pad):
    """Correct: torch.nn.functional.pad for the ids and the mask, the mode put back by hand."""
    was = model.training
    model.eval()
    full = torch.nn.functional.pad(ids, (pad, 0), value=0)
    mask = torch.nn.functional.pad(torch.ones_like(ids), (pad, 0), value=0)
    logits = model(input_ids=full, attention_mask=mask).logits[:, -ids.size(1):]
    model.train(was)
    return logits


def _adapter_bool_mask(model, ids, pad):
    """Correct: a bool keep-mask from the positions, turned into the long 0/1 mask."""
    with eval_mode(model):
        B, T = ids.shape
        full = torch.zeros(B, pad + T, dtype=torch.long)
        full[:, pad:] = ids
        keep = torch.arange(pad + T)[None, :].expand(B, -1) >= pad
        return model(input_ids=full, attention_mask=keep.long()).logits[:, pad:]


def _compare_logits(expected, got):
    """As the default comparison; more positions than real tokens are named: padding positions kept."""
    if (isinstance(expected, torch.Tensor) and isinstance(got, torch.Tensor) and got.dim() == expected.dim() == 3
            and got.shape[::2] == expected.shape[::2] and got.size(1) > expected.size(1)):
        return Problem("grader.ch10.padded_logits.padding_rows", {"got": got.size(1), "expected": expected.size(1)},
                       detail=compare_outputs(expected, got))
    return compare_outputs(expected, got)


ADAPTER_MODELS = (("gpt2", "eager"), ("gpt2", "sdpa"), ("llama", "sdpa"), ("mistral", "eager"), ("gemma3", "eager"))


def adapter_draw(d):
    """A model in training or eval mode, 0 to 6 padding tokens, real token ids that include 0 (the pad token's
    id: padding found by ids == 0 masks real tokens) and the last id of the vocabulary."""
    name, implementation = d.choice("model", ADAPTER_MODELS)
    training = d.flag("training")
    B, T, pad = d.size("B", 1, 3, edges=(1,)), d.size("T", 1, 6, edges=(1, 9)), d.size("pad", 0, 4, edges=(0, 1, 6))
    generator = d.generator("ids")
    ids = torch.randint(1, VOCAB, (B, T), generator=generator)
    ids.view(-1)[torch.randint(B * T, (2,), generator=generator)] = torch.tensor([0, VOCAB - 1])
    return Case(((name, implementation, 3, training), ids, pad),
                label=f"{name} {implementation}{', train()' if training else ''}, B={B}, T={T}, pad={pad}")


PADDED_LOGITS = Task(
    id="ch10.padded_logits", exercise=EXERCISE, reference=padded_logits, cases=adapter_cases, call=_call_adapter,
    contract=Contract(draw=adapter_draw, examples=4, neighbours=False), input_names=("model", "ids", "pad"),
    compare=_compare_logits,
    mutants={
        "wrong_side": _adapter_mutant(side="right"),
        "right_side_first_rows": _adapter_mutant(side="right", keep="first"),  # right padding, its real rows
        "no_attention_mask": _adapter_mutant(mask="none"),
        "mask_inverted": _adapter_mutant(mask="inverted"),
        "keeps_padding": _adapter_mutant(keep="first"),
        "no_eval": _adapter_mutant(train_mode=True),
    },
    alternatives=[_adapter_with_pad_function, _adapter_bool_mask],
)
