"""Exercise 4 (exercises/src/04-teacher-forcing.md): the shifted inputs and targets of a
batch of windows, the next-token loss from logits [B, T, V], a greedy decode loop
without a cache on the course's small GPT (the context cropped to ``block_size``), and,
optional, a causal block with hand-written attention, graded by its output and by the
course's causality tests (``attnlab.causality.assert_causal``) on a GPT built from it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..causality import cut_map, dependence_map, first_leak
from ..gpt import GPT, GPTConfig, pick_next
from ..grader import Case, Contract, Problem, Task, compare_outputs, watched_models
from ..multihead import merge_heads, split_heads
from . import case_device

EXERCISE = "04-teacher-forcing"


# --------------------------------------------------------------------------
# 1. shifted_targets(windows) -> (inputs, targets): windows [B, T+1] of token ids;
#    inputs = tokens 0..T-1, targets = tokens 1..T, both [B, T] (teacher forcing)


def shifted_targets(windows):
    return windows[:, :-1], windows[:, 1:]


WINDOW_SIZES = [(2, 9), (1, 7), (3, 13), (4, 5), (2, 17)]  # (B, T+1); the notebook shows one window of 6 tokens


def shift_cases(generator):
    cases = []
    for B, n in WINDOW_SIZES:
        windows = torch.randint(0, 50, (B, n), generator=generator).to(case_device())
        cases.append(Case((windows,), label=f"windows [{B}, {n}]"))
    return cases


ID_DTYPES = (torch.long, torch.int32)


def shift_draw(d):
    """Windows [B, T+1] of token ids up to a real vocabulary (50257, past int16), any layout, long or int32."""
    B, n = d.size("B", 1, 4, edges=(1,)), d.size("T+1", 2, 40, edges=(2, 1025))
    vocab = d.choice("vocab", (50257, 7, 2**31 - 1))
    return Case((d.integers("windows", (B, n), 0, vocab, dtype=d.choice("dtype", ID_DTYPES)),))


def loss_draw(d):
    """Logits [B, T, V] (float32 or float64, up to a few hundred: softmax underflows), contiguous or a slice of a
    larger buffer (as a model's head hands them over: ``view(-1, V)`` works on both)."""
    B, T = d.size("B", 1, 4, edges=(1,)), d.size("T", 1, 16, edges=(1, 64))
    V = d.size("V", 2, 40, edges=(2, 5000))
    dtype = d.choice("dtype", (torch.float32, torch.float64))
    logits = d.normal("logits", (B, T, V), dtype, scale=d.choice("scale", (2.0, 300.0)), layouts=("contiguous", "offset"))
    return Case((logits, d.integers("targets", (B, T), 0, V, layouts=("contiguous", "offset"))))


SHIFTED_TARGETS = Task(
    id="ch4.shifted_targets", exercise=EXERCISE, reference=shifted_targets, cases=shift_cases,
    contract=Contract(draw=shift_draw), output_names=("inputs", "targets"),
    mutants={
        "no_shift": lambda w: (w[:, :-1], w[:, :-1]),
        "wrong_way": lambda w: (w[:, 1:], w[:, :-1]),
        "label_in_input": lambda w: (w[:, 1:], w[:, 1:]),
        "input_keeps_last": lambda w: (w, w[:, 1:]),
        "too_short": lambda w: (w[:, :-2], w[:, 1:-1]),
        "shifted_by_two": lambda w: (w[:, :-2], w[:, 2:]),
    },
    alternatives=[
        lambda w: (w[..., :-1], w[..., 1:]),
        lambda w: [w.narrow(1, 0, w.size(1) - 1), w.narrow(1, 1, w.size(1) - 1)],
        lambda w: tuple(w.unfold(1, w.size(1) - 1, 1).unbind(1)),  # [B, 2, T]: the two windows of length T
        lambda w: (w[:, :-1].clone(), w.roll(-1, dims=1)[:, :-1]),
        lambda w: (w[:, :w.shape[1] - 1], w[:, 1:w.shape[1]]),
    ],
)


# --------------------------------------------------------------------------
# 2. next_token_loss(logits, targets) -> 0-d tensor: the mean cross-entropy over all
#    B x T positions; logits [B, T, V] (position t predicts targets[:, t]), targets [B, T]


def next_token_loss(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


LOSS_SIZES = [(2, 7, 11), (3, 5, 6), (3, 12, 20), (4, 9, 5), (2, 15, 8)]  # (B, T, V); the notebook shows (2, 3, 4)


def loss_cases(generator):
    device = case_device()
    cases = []
    for n, (B, T, V) in enumerate(LOSS_SIZES):
        # the last case: logits in the hundreds, where softmax underflows to 0 and log(softmax) gives inf
        logits = torch.randn(B, T, V, generator=generator) * (2 if n < len(LOSS_SIZES) - 1 else 200)
        targets = torch.randint(0, V, (B, T), generator=generator)
        cases.append(Case((logits.to(device), targets.to(device)), label=f"B={B}, T={T}, V={V}"))
    return cases


def _per_position(logits, targets):  # [B, T]
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(targets.shape)


def _manual_loss(logits, targets):
    log_probs = logits.log_softmax(dim=-1)  # [B, T, V]
    return -log_probs.gather(-1, targets.unsqueeze(-1)).mean()


def _logsumexp_loss(logits, targets):
    picked = logits.gather(-1, targets[..., None]).squeeze(-1)  # [B, T]: the target's logit
    return (logits.logsumexp(dim=-1) - picked).mean()


NEXT_TOKEN_LOSS = Task(
    id="ch4.next_token_loss", exercise=EXERCISE, reference=next_token_loss, cases=loss_cases,
    contract=Contract(draw=loss_draw, grads=("logits",)),
    mutants={
        "shifted_again": lambda logits, targets: F.cross_entropy(
            logits[:, :-1].flatten(0, 1), targets[:, 1:].flatten()),
        "misaligned_flatten": lambda logits, targets: F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), targets.t().reshape(-1)),
        "misaligned_flatten_logits": lambda logits, targets: F.cross_entropy(
            logits.transpose(0, 1).reshape(-1, logits.size(-1)), targets.reshape(-1)),
        "softmax_twice": lambda logits, targets: F.cross_entropy(
            logits.softmax(dim=-1).flatten(0, 1), targets.flatten()),
        "softmax_over_time": lambda logits, targets: -logits.log_softmax(dim=1).gather(
            -1, targets[..., None]).mean(),
        "no_log_softmax": lambda logits, targets: F.nll_loss(logits.flatten(0, 1), targets.flatten()),
        "sum": lambda logits, targets: _per_position(logits, targets).sum(),
        "sum_over_time": lambda logits, targets: _per_position(logits, targets).sum(dim=1).mean(),
        "log_of_softmax": lambda logits, targets: -logits.softmax(dim=-1).log().gather(-1, targets[..., None]).mean(),
    },
    alternatives=[
        lambda logits, targets: F.cross_entropy(logits.transpose(1, 2), targets),
        lambda logits, targets: F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1)),
        _manual_loss,
        _logsumexp_loss,
        lambda logits, targets: nn.CrossEntropyLoss()(logits.view(-1, logits.shape[-1]), targets.view(-1)),
        lambda logits, targets: _per_position(logits, targets).mean(dim=1).mean(),
    ],
)


# --------------------------------------------------------------------------
# 3. greedy_generate(model, prompt, n_new) -> [B, T0 + n_new]: the prompt [B, T0] and n_new
#    tokens appended one at a time, each the argmax of the last position's logits; no cache;
#    the model reads at most block_size tokens: feed it the LAST block_size tokens.


def greedy_generate(model, prompt, n_new):
    idx = prompt
    for _ in range(n_new):
        context = idx[:, -model.config.block_size:]  # [B, <= block_size]
        logits = model(context)[0]  # [B, T, V]
        next_id = logits[:, -1].argmax(dim=-1, keepdim=True)  # [B, 1]
        idx = torch.cat([idx, next_id], dim=1)
    return idx


GENERATE_SIZES = [  # (B, prompt, n_new, block_size, V, D, H); the notebook shows B=1, prompt=3, n_new=4, block_size=5
    (1, 3, 5, 12, 19, 16, 2), (2, 4, 9, 8, 23, 16, 4), (3, 2, 6, 10, 17, 24, 3), (2, 3, 7, 6, 29, 16, 2),
    (2, 2, 10, 4, 31, 32, 4),
]


def random_gpt_state(config, generator, blocks=1.0):
    """A state dict for GPT(config) with larger random weights than at initialization: the logits
    spread out, so every argmax is clear and every leak is far above rounding noise. ``blocks``
    scales the weights inside the blocks (larger: greedy decoding repeats itself less)."""
    with torch.random.fork_rng():  # GPT() draws its initial weights: the notebook's RNG stays as it was
        torch.manual_seed(int(torch.randint(0, 2**31, (), generator=generator)))
        model = GPT(config)
    state = {}
    for name, p in model.state_dict().items():
        if p.dim() == 2:
            scale = 0.5 if "embedding" in name or name == "head.weight" else blocks / math.sqrt(p.size(-1))
            p = torch.randn(p.shape, generator=generator) * scale
        state[name] = p
    state["head.weight"] = state["token_embedding.weight"]  # tied
    return state


def build_gpt(config, state, device):
    with torch.random.fork_rng():
        model = GPT(config)
    model.load_state_dict(state)
    # The learner's code runs with gradients on (it may use autograd on its inputs); the case models'
    # weights need none, so a forward pass builds no graph and costs what it costs under no_grad.
    return model.to(device).eval().requires_grad_(False)


def generate_cases(generator):
    device = case_device()
    cases = []
    for B, T0, n_new, block_size, V, D, H in GENERATE_SIZES:
        config = GPTConfig(vocab_size=V, block_size=block_size, n_layer=2, n_head=H, n_embd=D)
        state = {k: v.to(device) for k, v in random_gpt_state(config, generator, blocks=3.0).items()}
        prompt = torch.randint(0, V, (B, T0), generator=generator).to(device)
        cases.append(Case((config, state, prompt, n_new),
                          label=f"B={B}, prompt={T0}, n_new={n_new}, block_size={block_size}"))
    return cases


def _call_generate(fn, config, state, prompt, n_new):
    """A fresh model for every call: whatever the learner's function does to it stays in this call
    (and is named: the model put in training mode, its weights changed)."""
    model = build_gpt(config, state, prompt.device)
    with watched_models(model):
        return fn(model, prompt, n_new)


def _generate_mutant(position=-1, feed="all", crop="end", keep_prompt=True):
    def generate(model, prompt, n_new):
        idx = prompt
        block_size = model.config.block_size
        for _ in range(n_new):
            context = {"all": idx, "newest": idx[:, -1:], "prompt": prompt}[feed]
            context = {"end": context[:, -block_size:], "start": context[:, :block_size],
                       "one_short": context[:, -(block_size - 1):]}[crop]
            next_id = model(context)[0][:, position].argmax(dim=-1, keepdim=True)
            idx = torch.cat([idx, next_id], dim=1)
        return idx if keep_prompt else idx[:, prompt.size(1):]

    return generate


def _nanogpt_style(model, idx, max_new_tokens):
    for _ in range(max_new_tokens):
        idx_cond = idx if idx.size(1) <= model.config.block_size else idx[:, -model.config.block_size:]
        logits, _ = model(idx_cond)
        logits = logits[:, -1, :]  # [B, V]
        probs = F.softmax(logits, dim=-1)
        _, idx_next = torch.topk(probs, k=1, dim=-1)  # [B, 1]
        idx = torch.cat((idx, idx_next), dim=1)
    return idx


def _preallocated(model, prompt, n_new):
    B, T0 = prompt.shape
    out = torch.empty(B, T0 + n_new, dtype=torch.long, device=prompt.device)
    out[:, :T0] = prompt
    for t in range(T0, T0 + n_new):
        start = max(0, t - model.config.block_size)
        out[:, t] = pick_next(model(out[:, start:t])[0][:, -1])[:, 0]
    return out


def _cache_while_it_fits(model, prompt, n_new):
    """Correct: the course's generate (with a KV cache) while the sequence fits, then the loop."""
    fits = max(0, min(n_new, model.config.block_size - prompt.size(1)))
    idx = model.generate(prompt, fits, use_cache=True)
    for _ in range(n_new - fits):
        next_id = torch.max(model(idx[:, -model.config.block_size:])[0][:, -1], dim=-1).indices
        idx = torch.cat([idx, next_id[:, None]], dim=1)
    return idx


def _python_lists(model, prompt, n_new):
    rows = prompt.tolist()
    for _ in range(n_new):
        context = torch.tensor([row[-model.config.block_size:] for row in rows], device=prompt.device)
        best = model(context)[0][:, -1].argmax(dim=-1).tolist()
        rows = [row + [b] for row, b in zip(rows, best)]
    return torch.tensor(rows, device=prompt.device)


def generate_draw(d):
    """A small GPT, a prompt of 1 to longer than block_size tokens, 0 to 8 new tokens."""
    block_size = d.size("block_size", 1, 12, edges=(1, 3))
    H = d.size("n_head", 1, 4, edges=(1,))
    config = GPTConfig(vocab_size=d.size("V", 2, 40, edges=(2, 101)), block_size=block_size,
                       n_layer=d.size("n_layer", 1, 2, edges=(1,)), n_head=H, n_embd=H * d.size("d", 2, 8, edges=(4,)))
    generator = d.generator("weights")
    state = {k: v.to(d.device) for k, v in random_gpt_state(config, generator, blocks=3.0).items()}
    B, T0 = d.size("B", 1, 3, edges=(1,)), d.size("prompt", 1, block_size + 4, edges=(1, block_size + 2))
    prompt = torch.randint(0, config.vocab_size, (B, T0), generator=generator).to(d.device)
    n_new = d.size("n_new", 0, 8, edges=(0, 1))
    return Case((config, state, prompt, n_new),
                label=f"B={B}, prompt={T0}, n_new={n_new}, block_size={block_size}, V={config.vocab_size}")


GREEDY_GENERATE = Task(
    id="ch4.greedy_generate", exercise=EXERCISE, reference=greedy_generate, cases=generate_cases,
    call=_call_generate, contract=Contract(draw=generate_draw, examples=5),
    input_names=("config", "state", "prompt", "n_new"),
    mutants={
        "first_position": _generate_mutant(position=0),
        "newest_token_only": _generate_mutant(feed="newest"),
        "prompt_only": _generate_mutant(feed="prompt"),
        "crop_keeps_start": _generate_mutant(crop="start"),
        "crop_one_short": _generate_mutant(crop="one_short"),
        "new_tokens_only": _generate_mutant(keep_prompt=False),
    },
    course_copies=("attnlab.gpt.GPT.generate", "attnlab.window_cache.decode_greedy"),
    alternatives=[_nanogpt_style, _preallocated, _python_lists],
)


# --------------------------------------------------------------------------
# 4 (optional). causal_block(block, x) -> [B, T, D]: one pre-norm block of the course's GPT
#    (attnlab.gpt.Block) with the attention written by hand: split heads, scaled scores,
#    the causal mask, softmax over the keys, weighted values, merge heads, out_proj;
#    x + attention(norm_1(x)), then + mlp(norm_2(...)). Graded on its output and by the
#    course's causality tests on a GPT whose every block runs the learner's function.


def causal_block(block, x):
    attn = block.attn
    h = block.norm_1(x)  # [B, T, D]
    q, k, v = (split_heads(proj(h), attn.n_head) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))  # [B, H, T, d]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # [B, H, T, T]
    T = x.size(1)
    allowed = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
    x = x + attn.out_proj(merge_heads(weights @ v))
    return x + block.mlp(block.norm_2(x))


BLOCK_SIZES = [(32, 4, 8, 23), (48, 3, 9, 19), (16, 2, 6, 29), (24, 1, 7, 13)]  # (D, H, T, V): small, the cut test runs T passes


def block_cases(generator):
    device = case_device()
    cases = []
    for D, H, T, V in BLOCK_SIZES:
        config = GPTConfig(vocab_size=V, block_size=T, n_layer=1, n_head=H, n_embd=D)
        with torch.random.fork_rng():  # GPT() draws its weights: the notebook's RNG stays as it was
            torch.manual_seed(int(torch.randint(0, 2**31, (), generator=generator)))
            state = {name: p.to(device) for name, p in GPT(config).state_dict().items()}
        x = torch.randn(2, T, D, generator=generator).to(device)
        idx = torch.randint(0, V, (1, T), generator=generator).to(device)
        cases.append(Case((config, state, x, idx), label=f"D={D}, H={H}, T={T}"))
    return cases


def _call_block(fn, config, state, x, idx):
    """The learner's block on x, and the leaks that the course's assert_causal looks for in a GPT
    whose every block runs the learner's function: [2, T, T] bool, entry [test, t, s] = output t
    moves with the later input s (test 0: the prefix test, 1: the cut test). Every leaking pair,
    not only the first: which ones leak tells the mistakes apart (all later inputs: no mask;
    only the next one: a mask one position too wide)."""
    blocks = build_gpt(config, state, x.device).blocks  # what the learner's function is handed
    with watched_models(blocks):
        out = fn(blocks[0], x)
    model = build_gpt(config, state, x.device)  # its blocks run the learner's function on `blocks`
    for own, block in zip(model.blocks, blocks):
        own.forward = lambda h, cache=None, block=block: fn(block, h)
    T = idx.size(-1)
    future = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)
    maps = (dependence_map(model, idx), cut_map(model, idx))  # what assert_causal(model, idx) computes
    return out, torch.stack([(leak_map.cpu() > BLOCK_ATOL) & future for leak_map in maps])


BLOCK_ATOL = 1e-5  # assert_causal's default


def _compare_block(expected, got):
    (expected_out, expected_leaks), (got_out, got_leaks) = expected, got
    if not torch.equal(expected_leaks, got_leaks):
        leak = first_leak(got_leaks[0].float()) or first_leak(got_leaks[1].float())  # the pair assert_causal names
        if leak is not None:
            return Problem("grader.ch4_block_leak", {"t": leak[0], "s": leak[1]})
        return Problem("grader.ch4_block_no_leak")
    return compare_outputs(expected_out, got_out)


def _block_mutant(mask="causal", scale=True, softmax_dim=-1, transpose=True, residual=True):
    def block_fn(block, x):
        attn = block.attn
        h = block.norm_1(x)
        q, k, v = (split_heads(proj(h), attn.n_head) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
        size = {True: q.size(-1), False: 1.0, "model": x.size(-1)}[scale]  # "model": sqrt(D), not the head's d
        scores = q @ k.transpose(-2, -1) / math.sqrt(size)
        T = x.size(1)
        if mask in ("causal", "next", "zero", "upper"):
            ones = torch.ones(T, T, dtype=torch.bool, device=x.device)
            allowed = ones.triu() if mask == "upper" else ones.tril(diagonal=1 if mask == "next" else 0)
            scores = scores.masked_fill(~allowed, 0.0 if mask == "zero" else float("-inf"))
        out = scores.softmax(dim=softmax_dim) @ v  # [B, H, T, d]
        merged = merge_heads(out) if transpose else out.reshape(x.shape)
        a = attn.out_proj(merged)
        x = x + a if residual else a
        return x + block.mlp(block.norm_2(x))

    return block_fn


def _sdpa_block(block, x):
    attn = block.attn
    h = block.norm_1(x)
    q, k, v = (split_heads(proj(h), attn.n_head) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    x = x + attn.out_proj(merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True)))
    return x + block.mlp(block.norm_2(x))


def _loop_block(block, x):
    """Correct: one query row at a time, each reading keys 0..t only."""
    attn = block.attn
    h = block.norm_1(x)
    q, k, v = (split_heads(proj(h), attn.n_head) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    rows = []
    for t in range(x.size(1)):
        w = (q[:, :, t:t + 1] @ k[:, :, :t + 1].transpose(-2, -1) / q.size(-1) ** 0.5).softmax(dim=-1)
        rows.append(w @ v[:, :, :t + 1])
    x = x + attn.out_proj(merge_heads(torch.cat(rows, dim=2)))
    return x + block.mlp(block.norm_2(x))


def _additive_block(block, x):
    """Correct: an additive mask of -inf above the diagonal (a float mask, as Hugging Face adds it)."""
    attn = block.attn
    h = block.norm_1(x)
    B, T, D = x.shape
    q, k, v = (proj(h).view(B, T, attn.n_head, -1).transpose(1, 2) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    bias = torch.full((T, T), float("-inf"), device=x.device).triu(diagonal=1)
    weights = torch.softmax(q @ k.transpose(-2, -1) * q.size(-1) ** -0.5 + bias, dim=-1)
    x = x + attn.out_proj((weights @ v).transpose(1, 2).reshape(B, T, D))
    return x + block.mlp(block.norm_2(x))


def block_draw(d):
    """One block of a small GPT and x [B, T, D] (any layout), T from 1 on."""
    H, head = d.size("n_head", 1, 4, edges=(1,)), d.size("d", 1, 8, edges=(1, 12))
    T, V = d.size("T", 1, 8, edges=(1, 10)), d.size("V", 2, 30, edges=(2,))
    config = GPTConfig(vocab_size=V, block_size=max(T, 2), n_layer=1, n_head=H, n_embd=H * head)
    generator = d.generator("weights")  # weights larger than at initialization: the attention moves the output
    state = {name: p.to(d.device) for name, p in random_gpt_state(config, generator, blocks=1.0).items()}
    x = d.normal("x", (d.size("B", 1, 3, edges=(1,)), T, H * head), torch.float32)
    idx = torch.randint(0, V, (1, max(T, 2)), generator=generator).to(d.device)  # the leak tests need T >= 2
    return Case((config, state, x, idx), label=f"B={x.size(0)}, T={T}, n_head={H}, d={head}, x: {d.choices[-1].value}")


CAUSAL_BLOCK = Task(
    id="ch4.causal_block", exercise=EXERCISE, reference=causal_block, cases=block_cases,
    call=_call_block, compare=_compare_block, contract=Contract(draw=block_draw, examples=4, grads=("x",)),
    input_names=("config", "state", "x", "idx"),
    mutants={
        "no_mask": _block_mutant(mask=None),
        "no_scale": _block_mutant(scale=False),
        "softmax_over_queries": _block_mutant(softmax_dim=-2),
        "merge_without_transpose": _block_mutant(transpose=False),
        "no_residual": _block_mutant(residual=False),
        "reads_next": _block_mutant(mask="next"),
        "zero_fill": _block_mutant(mask="zero"),
        "scale_model_size": _block_mutant(scale="model"),
        "upper_triangle": _block_mutant(mask="upper"),  # triu() kept: each position reads itself and the future
    },
    course_copies=("attnlab.gpt.Block.forward", "attnlab.gpt.SelfAttention.forward", "attnlab.gpt.SelfAttention.attend"),
    alternatives=[_sdpa_block, _loop_block, _additive_block],
)

TASKS = [SHIFTED_TARGETS, NEXT_TOKEN_LOSS, GREEDY_GENERATE, CAUSAL_BLOCK]
