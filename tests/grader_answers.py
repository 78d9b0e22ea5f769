"""Learner answers written for the grader's tests: for every task, wrong answers of the classes a
comparison of outputs alone cannot see (an input edited in place, a tensor made on the CPU, a
generator ignored, an 80/10/10 split that follows the position, dropout in the wrong place or
at the wrong rate) or, where none of those can happen (the task takes only numbers), the nearest
mistakes a learner makes; and a correct rewrite the grader must give full marks."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

from attnlab.exercises import all_tasks
from learner_copies import as_learner, learner_copy, learner_tasks  # noqa: F401
from attnlab.multihead import merge_heads, split_heads

TASKS = learner_tasks(all_tasks())  # the grader's answers as a learner would hand them in


def _ref(task_id):
    return TASKS[task_id].reference


# --------------------------------------------------------------------------
# Generic wrong answers: the right output, and one thing done wrong besides


def _corrupt(value) -> bool:
    """Edit the first tensor in ``value`` in place (as a data bug would); True if there was one."""
    if isinstance(value, torch.Tensor) and value.numel():
        if value.dtype == torch.bool:
            value.logical_not_()
        elif value.is_floating_point():
            value.mul_(-2.0)
        else:
            value.add_(1)
        return True
    if isinstance(value, (list, tuple)):
        return any(_corrupt(v) for v in value)
    return False


def _mix_cpu(out):
    """``out`` plus a tensor made without device= (on the CPU): a no-op on the CPU, an error elsewhere."""
    if isinstance(out, torch.Tensor):
        if out.dim() == 0:  # a 0-d CPU tensor mixes with any device: use a [1] one
            return (out.reshape(1) + torch.zeros(1, dtype=out.dtype)).reshape(())
        if out.dtype == torch.bool:
            return out & torch.ones(out.shape, dtype=torch.bool)
        return out + torch.zeros(out.shape, dtype=out.dtype)
    if isinstance(out, (list, tuple)):
        return type(out)([_mix_cpu(out[0]), *out[1:]])
    return out


def edits_input(task_id):
    reference = _ref(task_id)
    if isinstance(reference, type):  # exercise 2's module: forward edits x
        class EditsInput(reference):
            def forward(self, x):
                out = super().forward(x)
                x.mul_(-2.0)
                return out

        return EditsInput

    def answer(*args, **kwargs):
        out = reference(*args, **kwargs)
        _corrupt(list(args))
        return out

    return answer


def cpu_tensor(task_id):
    reference = _ref(task_id)
    if isinstance(reference, type):
        class CpuTensor(reference):
            def forward(self, x):
                return _mix_cpu(super().forward(x))

        return CpuTensor

    return lambda *args, **kwargs: _mix_cpu(reference(*args, **kwargs))


def additive_mask(task_id):
    """A 0/-inf float mask where a bool one is asked."""
    reference = _ref(task_id)

    def additive(m):
        return torch.zeros(m.shape, device=m.device).masked_fill(~m, float("-inf"))

    def answer(*args):
        out = reference(*args)
        return additive(out) if isinstance(out, torch.Tensor) else type(out)(additive(m) for m in out)

    return answer


# --------------------------------------------------------------------------
# Task by task: two wrong answers in the classes above (or, for tasks that take only numbers,
# the nearest mistakes), each with the message it must get, and one correct rewrite.
# WRONG[task] = [(what, answer, key the grader must name)]; RIGHT[task] = answer


def _ones(*shape, like=None):
    return torch.ones(*shape, dtype=torch.bool, device=None if like is None else like.device)


def _hard_coded(task_id, *example):
    """The worked example's answer, whatever the arguments."""
    fixed = _ref(task_id)(*example)
    return lambda *args, **kwargs: fixed


def _masked_softmax_in_place(s, a):
    return s.masked_fill_(~a, float("-inf")).softmax(dim=-1)


def _masked_softmax_cpu_mask(s, a):
    blocked = torch.full(s.shape, float("-inf"))  # no device=
    return torch.where(a, s, blocked).softmax(dim=-1)


def _future_weight_in_place(w, a):
    return w.masked_fill_(a, 0.0).sum(dim=-1)


def _convert_in_place(mask, source, target, dtype=torch.float32):
    if source == "mha":
        mask = mask.logical_not_()  # the caller's mask flips
        source = "sdpa"
    return _ref("ch1.convert_mask")(mask, source, target, dtype)


def _convert_cpu(mask, source, target, dtype=torch.float32):
    allowed = mask if source == "sdpa" else ~mask if source == "mha" else mask == 0
    if target == "additive":
        return torch.zeros(mask.shape, dtype=dtype).masked_fill(~allowed, float("-inf"))  # no device=
    return allowed if target == "sdpa" else ~allowed


def _split_heads_in_place(x, n_heads):
    B, T, D = x.shape
    out = x.reshape(B, T, n_heads, D // n_heads).transpose(1, 2).clone()
    x.zero_()  # "frees" the input
    return out


def _merge_heads_cpu(x):
    B, H, T, d = x.shape
    out = torch.zeros(B, T, H * d, dtype=x.dtype)  # on the CPU
    for h in range(H):  # head by head into the output
        out = out + F.pad(x[:, h], (h * d, (H - 1 - h) * d))
    return out


def _attention_dropout_on_values(q, k, v, dropout_p, training):
    return F.scaled_dot_product_attention(q, k, F.dropout(v, p=dropout_p, training=training), is_causal=True)


def _attention_dropout_half(q, k, v, dropout_p, training):
    return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p / 2 if training else 0.0, is_causal=True)


def _attention_cpu_mask(q, k, v, dropout_p, training):
    T = q.size(-2)
    allowed = torch.ones(T, T, dtype=torch.bool).tril()  # no device=
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=dropout_p if training else 0.0)


def _new_queries_cpu(q, k, v):
    T_q, T_kv = q.size(-2), k.size(-2)
    allowed = torch.ones(T_q, T_kv, dtype=torch.bool).tril(diagonal=T_kv - T_q)  # no device=
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


def _new_queries_scaled_in_place(q, k, v):
    T_q, T_kv = q.size(-2), k.size(-2)
    q.mul_(1.0 / math.sqrt(q.size(-1)))  # scales the caller's queries
    scores = q @ k.transpose(-2, -1)
    allowed = torch.ones(T_q, T_kv, dtype=torch.bool, device=q.device).tril(diagonal=T_kv - T_q)
    return scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v


def _tile_kinds_rewrite(T, block):
    n = (T + block - 1) // block
    return [[("skipped", "diagonal", "full")[(j <= i) + (j < i)] for j in range(n)] for i in range(n)]


def _score_flops_rewrite(T, block, d):
    total = 0
    for i in range(0, T, block):
        rows = min(block, T - i)
        keys = min(i + block, T)  # every key up to the end of this query tile
        total += 2 * rows * keys * d
    return total


def _shifted_in_place(windows):
    inputs, targets = windows[:, :-1].clone(), windows[:, 1:].clone()
    windows.fill_(0)  # "free" the batch
    return inputs, targets


def _shifted_cpu(windows):
    n = windows.size(1) - 1
    index = torch.arange(n)  # used to index: fine on a GPU too ...
    return windows[:, index], windows[:, index + 1] + torch.zeros(windows.size(0), n, dtype=torch.long)  # ... this is not


def _loss_in_place(logits, targets):
    logits.sub_(logits.logsumexp(-1, keepdim=True))  # log-softmax in place: the caller's logits change
    return -logits.gather(-1, targets[..., None]).mean()


def _loss_cpu_weight(logits, targets):
    weight = torch.ones(logits.size(-1))  # class weights made on the CPU
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), weight=weight)


def _generate_in_place(model, prompt, n_new):
    out = _ref("ch4.greedy_generate")(model, prompt, n_new)
    prompt.zero_()
    return out


def _generate_on_cpu(model, prompt, n_new):
    out = torch.empty(prompt.size(0), 0, dtype=torch.long)  # the new tokens, collected on the CPU
    idx = prompt
    for _ in range(n_new):
        next_id = model(idx[:, -model.config.block_size:])[0][:, -1].argmax(-1, keepdim=True)
        out = torch.cat([out, next_id.cpu()], dim=1)
        idx = torch.cat([idx, next_id], dim=1)
    return torch.cat([prompt.cpu(), out], dim=1).to(prompt.device) if prompt.device.type == "cpu" else out


def _generate_rewrite(model, prompt, n_new):
    out = prompt.clone()
    for _ in range(n_new):
        logits, *_ = model(out[:, max(0, out.size(1) - model.config.block_size):])
        out = torch.cat([out, logits[:, -1:].argmax(dim=-1)], dim=1)
    return out


def _prefix_in_place(model, idx, atol=1e-5):
    result = _ref("ch5.prefix_leaks")(model, idx, atol)
    idx[:, -1] = 0  # "restores" the input by hand, wrongly
    return result


def _prefix_changes_idx(model, idx, atol=1e-5):
    leaks = _ref("ch5.prefix_leaks")(model, idx, atol)
    idx.add_(1).remainder_(model.config.vocab_size)
    return leaks


def _prefix_rewrite(model, idx, atol=1e-5):
    from attnlab.exercises.ch5 import logits_of, vocab_size_of

    was_training = model.training
    model.eval()
    T = idx.size(-1)
    base = logits_of(model, idx.view(1, T))[0]  # [T, V]
    leaks = torch.zeros(T, T, dtype=torch.bool, device=idx.device)
    for s in range(1, T):
        other = idx.view(1, T).clone()
        other[0, s] = (other[0, s] + 1) % vocab_size_of(model)
        moved = (logits_of(model, other)[0] - base).abs().amax(dim=-1) > atol  # [T] outputs t
        leaks[:s, s] = moved[:s]
    model.train(was_training)
    return leaks


def _cut_rewrite(model, idx, atol=1e-5):
    from attnlab.exercises.ch5 import logits_of

    was_training = model.training
    model.eval()
    T = idx.size(-1)
    full = logits_of(model, idx.view(1, T))[0]
    columns = [torch.zeros(T, dtype=torch.bool, device=idx.device)]
    for s in range(1, T):
        part = logits_of(model, idx.view(1, T)[:, :s])[0]  # [s, V]
        far = ~torch.isclose(part, full[:s], atol=atol, rtol=0).all(dim=-1)
        columns.append(torch.cat([far, torch.zeros(T - s, dtype=torch.bool, device=idx.device)]))
    model.train(was_training)
    return torch.stack(columns, dim=1)


def _cut_in_place(model, idx, atol=1e-5):
    result = _ref("ch5.cut_leaks")(model, idx, atol)
    idx.fill_(1)
    return result


def _cut_changes_idx_rows(model, idx, atol=1e-5):
    result = _ref("ch5.cut_leaks")(model, idx, atol)
    idx[0, 0] = (idx[0, 0] + 1) % model.config.vocab_size
    return result


def _decode_step_in_place(attn, position_embedding, x, k_cache, v_cache):
    out = _ref("ch6.decode_step")(attn, position_embedding, x, k_cache, v_cache)
    x[:, -1:] += 1.0  # adds the position to the caller's x, as if it were the hidden state
    return out


def _decode_step_cpu(attn, position_embedding, x, k_cache, v_cache):
    out, k_cache, v_cache = _ref("ch6.decode_step")(attn, position_embedding, x, k_cache, v_cache)
    total = torch.zeros(out.shape)  # an accumulator made on the CPU
    total += out
    return total, k_cache, v_cache


def _decode_step_rewrite(attn, position_embedding, x, k_cache, v_cache):
    B, _, D = x.shape
    t = k_cache.size(2)
    h = x[:, t:t + 1] + position_embedding.weight[t]
    heads = [p(h).reshape(B, 1, attn.n_head, D // attn.n_head).permute(0, 2, 1, 3)
             for p in (attn.q_proj, attn.k_proj, attn.v_proj)]
    keys, values = torch.cat([k_cache, heads[1]], 2), torch.cat([v_cache, heads[2]], 2)
    weights = (heads[0] @ keys.transpose(2, 3) / math.sqrt(D // attn.n_head)).softmax(-1)
    return attn.out_proj((weights @ values).permute(0, 2, 1, 3).reshape(B, 1, D)), keys, values


def _kv_bytes_rewrite(config, batch_size, seq_len, dtype):
    head_dim = config.n_embd // config.n_head
    n_kv = getattr(config, "n_kv_head", None) or config.n_head
    return 2 * config.n_layer * batch_size * seq_len * n_kv * head_dim * torch.empty((), dtype=dtype).element_size()


def _bert_global_rng(ids, mask_id, vocab_size, generator):
    return _ref("ch7.bert_corrupt")(ids, mask_id, vocab_size, None)  # generator=None: torch's global RNG


def _bert_in_place(ids, mask_id, vocab_size, generator):
    inputs, labels = _ref("ch7.bert_corrupt")(ids.clone(), mask_id, vocab_size, generator)
    ids.copy_(inputs)  # corrupts the caller's batch: the next epoch trains on [MASK]ed text
    return inputs, labels


def _bert_split_by_row(ids, mask_id, vocab_size, generator):
    """The first 80% of the rows get [MASK], then 10% random, then 10% kept."""
    chosen = torch.rand(ids.shape, generator=generator, device=ids.device) < 0.15
    row = torch.arange(ids.numel(), device=ids.device).view(ids.shape) / ids.numel()
    random_ids = torch.randint(0, vocab_size, ids.shape, generator=generator, device=ids.device)
    inputs = torch.where(chosen & (row < 0.8), mask_id, ids)
    inputs = torch.where(chosen & (row >= 0.8) & (row < 0.9), random_ids, inputs)
    return inputs, torch.where(chosen, ids, -100)


def _bert_rewrite(ids, mask_id, vocab_size, generator):
    u = torch.rand(ids.shape, generator=generator, device=ids.device)
    r = torch.randint(vocab_size, ids.shape, generator=generator, device=ids.device)
    chosen = u < 0.15
    inputs = ids.clone()
    inputs[u < 0.15 * 0.8] = mask_id
    between = (u >= 0.15 * 0.8) & (u < 0.15 * 0.9)
    inputs[between] = r[between]
    labels = torch.full_like(ids, -100)
    labels[chosen] = ids[chosen]
    return inputs, labels


def _mlm_loss_in_place(logits, labels):
    logits.sub_(logits.logsumexp(-1, keepdim=True))  # log-softmax in place
    chosen = labels != -100
    return -logits[chosen].gather(-1, labels[chosen][:, None]).mean()


def _mlm_loss_cpu_mask(logits, labels):
    chosen = labels != -100
    weights = chosen.float() * torch.ones(labels.shape)  # ones() on the CPU, no device=
    per_token = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
    return (per_token * weights).sum() / chosen.sum()


def _padded_cpu(keep):
    B, T = keep.shape
    causal = torch.ones(T, T, dtype=torch.bool).tril()  # no device=
    return (causal & keep[:, None, :])[:, None]


def _document_in_place(document_ids):
    document_ids += 1  # "1-based" ids, in the caller's tensor
    return _ref("ch8.document_mask")(document_ids)


def _document_cpu(document_ids):
    T = document_ids.size(1)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    return (causal & (document_ids[:, :, None] == document_ids[:, None, :]))[:, None]


def _gqa_enable(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def _gqa_scaled_in_place(q, k, v):
    q.mul_(1.0 / math.sqrt(q.size(-1)))  # scales the caller's queries, then tells SDPA not to scale
    G = q.size(1) // k.size(1)
    k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0)


def _rope_in_place(q_new, k_new, v_new, k_cache, v_cache):
    from attnlab.rope import apply_rope

    t = k_cache.size(2)
    positions = torch.arange(t, t + q_new.size(2), device=q_new.device)
    q_new.copy_(apply_rope(q_new, positions))  # rotates the caller's tensors in place
    k_new.copy_(apply_rope(k_new, positions))
    keys, values = torch.cat([k_cache, k_new], 2), torch.cat([v_cache, v_new], 2)
    allowed = torch.ones(q_new.size(2), keys.size(2), dtype=torch.bool, device=q_new.device).tril(diagonal=t)
    return F.scaled_dot_product_attention(q_new, keys, values, attn_mask=allowed), keys, values


def _rope_cpu_positions(q_new, k_new, v_new, k_cache, v_cache):
    from attnlab.rope import apply_rope

    t, T_new = k_cache.size(2), q_new.size(2)
    positions = torch.arange(t, t + T_new)  # no device=
    allowed = torch.ones(T_new, t + T_new, dtype=torch.bool).tril(diagonal=t)  # no device=
    keys = torch.cat([k_cache, apply_rope(k_new, positions)], 2)
    values = torch.cat([v_cache, v_new], 2)
    return F.scaled_dot_product_attention(apply_rope(q_new, positions), keys, values, attn_mask=allowed), keys, values


def _fold_in_place(m, l, acc, scores, v):
    m_new = torch.maximum(m, scores.amax(-1))
    correction = (m - m_new).exp()
    p = (scores - m_new[..., None]).exp()
    l.mul_(correction).add_(p.sum(-1))  # updates the caller's state in place
    acc.mul_(correction[..., None]).add_(p @ v)
    return m_new, l, acc


def _fold_cpu(m, l, acc, scores, v):
    m_new = torch.maximum(m, scores.amax(-1))
    p = (scores - m_new[..., None]).exp()
    ones = torch.ones(p.shape[-1])  # on the CPU
    return m_new, l * (m - m_new).exp() + p @ ones, acc * (m - m_new).exp()[..., None] + p @ v


def _fold_rewrite(m, l, acc, scores, v):
    both = torch.cat([m[..., None], scores], -1)
    m_new = both.amax(-1)
    scale, p = (m - m_new).exp(), (scores - m_new[..., None]).exp()
    return m_new, torch.addcmul(p.sum(-1), l, scale), torch.baddbmm(
        (acc * scale[..., None]).flatten(0, -3), p.flatten(0, -3), v.flatten(0, -3)).view_as(acc)


def _shard_rewrite(T, P, layout):
    S = T // P
    if layout == "contiguous":
        return [[r * S + i for i in range(S)] for r in range(P)]
    if layout == "striped":
        return [[r + P * i for i in range(S)] for r in range(P)]
    c = S // 2
    return [[*range(r * c, (r + 1) * c), *range((2 * P - 1 - r) * c, (2 * P - r) * c)] for r in range(P)]


def _mha_rewrite():
    reference = _ref("ch2.mha_forward")

    class Rewrite(reference):
        def forward(self, x):
            B, T, D = x.shape
            H = self.n_heads
            q, k, v = (p(x).unflatten(-1, (H, D // H)).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
            future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            w = (q @ k.mT / math.sqrt(D // H)).masked_fill(future, float("-inf")).softmax(-1)
            return self.out_proj((w @ v).transpose(1, 2).flatten(2))

    return Rewrite


def _tiles_rewrite(T, P, layout, block):
    pos = attnlab.ring.shard_positions(T, P, layout).tolist()  # task 1's course tool: fine in task 2
    S = T // P

    def tiles(r):
        return [pos[r][i:i + block] for i in range(0, S, block)]

    return [[sum(1 for q in tiles(r) for k in tiles((r - t) % P) if min(k) <= max(q)) for t in range(P)]
            for r in range(P)]


def _encoder_causal_cross_transposed(T_enc, T_dec):
    return (torch.ones(T_enc, T_enc, dtype=torch.bool).tril(), torch.ones(T_dec, T_dec, dtype=torch.bool).tril(),
            torch.ones(T_enc, T_dec, dtype=torch.bool))


I = "grader.changed_input"
D = "grader.device_mix"
M = "grader.mutant."
WRONG = {
    "ch1.causal_mask": [("additive 0/-inf mask", additive_mask("ch1.causal_mask"), "grader.additive_for_bool"),
                        ("worked example T=4 hard-coded", _hard_coded("ch1.causal_mask", 4), "grader.hardcoded")],
    "ch1.masked_softmax": [("masked_fill_ on the scores", _masked_softmax_in_place, I),
                           ("mask rebuilt on the CPU", _masked_softmax_cpu_mask, D)],
    "ch1.future_weight": [("masked_fill_ on the weights", _future_weight_in_place, I),
                          ("a CPU tensor mixed in", cpu_tensor("ch1.future_weight"), D)],
    "ch1.convert_mask": [("logical_not_ on the mha mask", _convert_in_place, I),
                         ("additive mask without device=", _convert_cpu, D)],
    "ch2.split_heads": [("zero_ on x", _split_heads_in_place, I), ("a CPU tensor mixed in", cpu_tensor("ch2.split_heads"), D)],
    "ch2.merge_heads": [("x edited", edits_input("ch2.merge_heads"), I), ("output buffer on the CPU", _merge_heads_cpu, D)],
    "ch2.mha_forward": [("forward edits x", edits_input("ch2.mha_forward"), I),
                        ("a CPU tensor mixed in", cpu_tensor("ch2.mha_forward"), D)],
    "ch3.attention_forward": [("dropout on v", _attention_dropout_on_values, M + "ch3.attention_forward.dropout_wrong_place"),
                              ("dropout at half the rate", _attention_dropout_half, M + "ch3.attention_forward.dropout_wrong_rate"),
                              ("mask without device=", _attention_cpu_mask, D)],
    "ch3.attend_new_queries": [("q scaled in place", _new_queries_scaled_in_place, I),
                               ("mask without device=", _new_queries_cpu, D)],
    "ch3.tile_kinds": [("example T=8, block=4 hard-coded", _hard_coded("ch3.tile_kinds", 8, 4), "grader.hardcoded"),
                       ("a tensor of codes", lambda T, b: torch.tensor([[len(k) for k in row] for row in _ref("ch3.tile_kinds")(T, b)]),
                        "grader.wrong_type")],
    "ch3.score_flops": [("example hard-coded", _hard_coded("ch3.score_flops", 16, 4, 8), "grader.hardcoded"),
                        ("d forgotten", lambda T, b, d: _ref("ch3.score_flops")(T, b, d) // d, "grader.value")],
    "ch4.shifted_targets": [("windows zeroed", _shifted_in_place, I), ("targets made on the CPU", _shifted_cpu, D)],
    "ch4.next_token_loss": [("log-softmax in place", _loss_in_place, I), ("class weights on the CPU", _loss_cpu_weight, D)],
    "ch4.greedy_generate": [("prompt zeroed", _generate_in_place, I), ("edits the prompt", edits_input("ch4.greedy_generate"), I)],
    "ch5.prefix_leaks": [("idx edited", _prefix_in_place, I), ("idx shifted", _prefix_changes_idx, I)],
    "ch5.cut_leaks": [("idx filled", _cut_in_place, I), ("one token changed", _cut_changes_idx_rows, I)],
    "ch6.decode_step": [("x edited", _decode_step_in_place, I), ("an accumulator on the CPU", _decode_step_cpu, "grader.device_mix_output")],
    "ch6.decode_mask": [("additive 0/-inf mask", additive_mask("ch6.decode_mask"), "grader.additive_for_bool"),
                        ("offset with the wrong sign", lambda T_q, T_kv: torch.ones(T_q, T_kv, dtype=torch.bool).tril(T_q - T_kv),
                         M + "ch6.decode_mask.offset_sign")],
    "ch6.kv_cache_bytes": [("4 bytes whatever the dtype", lambda c, B, T, dtype: _ref("ch6.kv_cache_bytes")(c, B, T, torch.float32),
                            "grader.value"),
                           ("bits, not bytes", lambda c, B, T, dtype: 8 * _ref("ch6.kv_cache_bytes")(c, B, T, dtype), "grader.value")],
    "ch7.prefix_lm_mask": [("additive 0/-inf mask", additive_mask("ch7.prefix_lm_mask"), "grader.additive_for_bool"),
                           ("example T=5, prefix=2 hard-coded", _hard_coded("ch7.prefix_lm_mask", 5, 2), "grader.hardcoded")],
    "ch7.encoder_decoder_masks": [("additive 0/-inf masks", additive_mask("ch7.encoder_decoder_masks"), "grader.additive_for_bool"),
                                  ("two mistakes: encoder causal, cross transposed", _encoder_causal_cross_transposed,
                                   M + "ch7.encoder_decoder_masks.cross_transposed")],
    "ch7.bert_corrupt": [("global RNG, generator ignored", _bert_global_rng, M + "ch7.bert_corrupt.generator_ignored"),
                         ("the caller's ids corrupted", _bert_in_place, I),
                         ("80/10/10 by position", _bert_split_by_row, M + "ch7.bert_corrupt.split_by_position")],
    "ch7.mlm_loss": [("log-softmax in place", _mlm_loss_in_place, I), ("weights on the CPU", _mlm_loss_cpu_mask, D)],
    "ch8.padded_causal_mask": [("keep edited", edits_input("ch8.padded_causal_mask"), I), ("causal part without device=", _padded_cpu, D)],
    "ch8.document_mask": [("ids renumbered in place", _document_in_place, I), ("causal part without device=", _document_cpu, D)],
    "ch8.sliding_window_mask": [("example W=3 hard-coded", lambda T, W: _ref("ch8.sliding_window_mask")(T, 3),
                                 M + "ch8.sliding_window_mask.window_ignored"),
                                ("additive 0/-inf mask", additive_mask("ch8.sliding_window_mask"), "grader.additive_for_bool")],
    "ch8.gqa_attention": [("enable_gqa=True", _gqa_enable, "grader.forbidden.ch8.gqa_attention.enable_gqa"),
                          ("q scaled in place", _gqa_scaled_in_place, I),
                          ("a CPU tensor mixed in", cpu_tensor("ch8.gqa_attention"), D)],
    "ch8.rope_decode_step": [("q_new, k_new rotated in place", _rope_in_place, I),
                             ("positions and mask without device=", _rope_cpu_positions, D)],
    "ch9.shard_positions": [("example hard-coded", _hard_coded("ch9.shard_positions", 16, 4, "zigzag"), "grader.hardcoded"),
                            ("float positions", lambda T, P, layout: _ref("ch9.shard_positions")(T, P, layout).float(), "grader.dtype")],
    "ch9.tiles_per_step": [("example hard-coded", _hard_coded("ch9.tiles_per_step", 16, 4, "contiguous", 2), "grader.hardcoded"),
                           ("ranks and steps swapped", lambda *a: [list(r) for r in zip(*_ref("ch9.tiles_per_step")(*a))], None)],
    "ch9.fold_block": [("state updated in place", _fold_in_place, I), ("ones on the CPU", _fold_cpu, D)],
}

RIGHT = {
    "ch1.causal_mask": lambda T: torch.arange(T).unsqueeze(1) >= torch.arange(T),
    # (issue 33: this rewrite took the maximum over the blocked keys too; scores far above the rest showed it)
    "ch1.masked_softmax": lambda s, a: (lambda e: e / e.sum(-1, keepdim=True))(
        (s.masked_fill(~a, -math.inf) - s.masked_fill(~a, -math.inf).amax(-1, keepdim=True)).exp()),
    "ch1.future_weight": lambda w, a: w.sum(-1) - (w * a).sum(-1),
    "ch1.convert_mask": lambda mask, source, target, dtype=torch.float32: (
        lambda allowed: {"sdpa": allowed, "mha": ~allowed,
                         "additive": torch.zeros_like(allowed, dtype=dtype).masked_fill(~allowed, float("-inf"))}[target])(
        {"sdpa": lambda m: m.bool(), "mha": lambda m: ~m, "additive": lambda m: m == 0}[source](mask)),
    "ch2.split_heads": lambda x, H: x.reshape(x.size(0), x.size(1), H, -1).permute(0, 2, 1, 3),
    "ch2.merge_heads": lambda x: x.permute(0, 2, 1, 3).flatten(2),
    "ch2.mha_forward": _mha_rewrite(),
    "ch3.attention_forward": lambda q, k, v, p, training: F.scaled_dot_product_attention(
        q, k, v, attn_mask=torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril(),
        dropout_p=p if training else 0.0),
    "ch3.attend_new_queries": lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril(k.size(-2) - q.size(-2))),
    "ch3.tile_kinds": _tile_kinds_rewrite,
    "ch3.score_flops": _score_flops_rewrite,
    "ch4.shifted_targets": lambda w: (w[:, :-1].clone(), w.roll(-1, dims=1)[:, :-1]),
    "ch4.next_token_loss": lambda logits, targets: -F.log_softmax(logits, -1).gather(-1, targets[..., None]).mean(),
    "ch4.greedy_generate": _generate_rewrite,
    "ch5.prefix_leaks": _prefix_rewrite,
    "ch5.cut_leaks": _cut_rewrite,
    "ch6.decode_step": _decode_step_rewrite,
    "ch6.decode_mask": lambda T_q, T_kv: torch.arange(T_kv)[None, :] - torch.arange(T_q)[:, None] <= T_kv - T_q,
    "ch6.kv_cache_bytes": _kv_bytes_rewrite,
    "ch7.prefix_lm_mask": lambda T, p: torch.maximum(torch.ones(T, T).tril(), (torch.arange(T) < p).float().expand(T, T)).bool(),
    "ch7.encoder_decoder_masks": lambda T_enc, T_dec: (torch.ones(T_enc, T_enc) > 0, torch.ones(T_dec, T_dec).tril() > 0,
                                                       torch.ones(T_dec, T_enc) > 0),
    "ch7.bert_corrupt": _bert_rewrite,
    "ch7.mlm_loss": lambda logits, labels: (F.cross_entropy(logits.transpose(1, 2), labels, reduction="none").sum()
                                            / (labels != -100).sum()),
    "ch8.padded_causal_mask": lambda keep: keep[:, None, None, :].expand(-1, 1, keep.size(1), -1).tril(),
    "ch8.document_mask": lambda ids: ((ids[:, None, :] == ids[:, :, None])
                                      & (torch.arange(ids.size(1), device=ids.device)[:, None]
                                         >= torch.arange(ids.size(1), device=ids.device)))[:, None],
    "ch8.sliding_window_mask": lambda T, W: ((torch.arange(T)[:, None] - torch.arange(T)) >= 0)
    & ((torch.arange(T)[:, None] - torch.arange(T)) <= W - 1),
    "ch8.gqa_attention": lambda q, k, v: F.scaled_dot_product_attention(
        q, k[:, torch.arange(q.size(1), device=q.device) // (q.size(1) // k.size(1))],
        v[:, torch.arange(q.size(1), device=q.device) // (q.size(1) // k.size(1))], is_causal=True),
    "ch8.rope_decode_step": None,  # set below
    "ch9.shard_positions": _shard_rewrite,
    "ch9.tiles_per_step": _tiles_rewrite,
    "ch9.fold_block": _fold_rewrite,
}


def _rope_rewrite(q_new, k_new, v_new, k_cache, v_cache):
    from attnlab.rope import apply_rope

    t, T_new = k_cache.size(2), q_new.size(2)
    positions = t + torch.arange(T_new, device=q_new.device)
    keys = torch.cat([k_cache, apply_rope(k_new, positions)], 2)
    values = torch.cat([v_cache, v_new], 2)
    key_pos = torch.arange(t + T_new, device=q_new.device)
    scores = apply_rope(q_new, positions) @ keys.mT / math.sqrt(q_new.size(-1))
    scores = scores.masked_fill(key_pos[None, :] > positions[:, None], float("-inf"))
    return scores.softmax(-1) @ values, keys, values


RIGHT["ch8.rope_decode_step"] = _rope_rewrite


# --------------------------------------------------------------------------
# The tasks of exercises 4 (optional block), 9 (pass_on), 10 and 11, added with those exercises.

def _block_peeks_ahead(block, x):
    """A residual stream that also reads position t + 1: the leak the causality tests must find."""
    return _ref("ch4.causal_block")(block, x) + 1e-3 * x.roll(-1, dims=1)


def _block_upper_triangle(block, x):
    """Keeps triu() instead of tril(): each position reads itself and the future, not the past."""
    attn = block.attn
    h = block.norm_1(x)
    q, k, v = (split_heads(proj(h), attn.n_head) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    T = x.size(1)
    allowed = torch.ones(T, T, dtype=torch.bool, device=x.device).triu()
    scores = (q @ k.mT / math.sqrt(q.size(-1))).masked_fill(~allowed, float("-inf"))
    x = x + attn.out_proj(merge_heads(scores.softmax(-1) @ v))
    return x + block.mlp(block.norm_2(x))


def _leaky_last_token_only(models, ids, atol=1e-5):
    """A prefix test that changes only the last token, in no_grad and with allclose."""
    flags = []
    with torch.no_grad():
        for model in models:
            model.eval()
            other = ids.clone()
            other[:, -1] = 1 if int(ids[0, -1]) != 1 else 2
            before, after = model(input_ids=ids).logits, model(input_ids=other).logits
            flags.append(not torch.allclose(before[:, :-1], after[:, :-1], rtol=0, atol=atol))
    return flags


def _padded_logits_on_the_right(model, ids, pad):
    """Pads on the right with the matching mask and keeps the real rows: right for RoPE, not for GPT-2."""
    model.eval()
    full = F.pad(ids, (0, pad))
    mask = F.pad(torch.ones_like(ids), (0, pad))
    return model(input_ids=full, attention_mask=mask).logits[:, :ids.size(1)]


def _padded_logits_with_pads(model, ids, pad):
    """The right logits, plus a zero row where the padding sits: a shape the task does not ask for."""
    out = _ref("ch10.padded_logits")(model, ids, pad)
    return torch.cat([torch.zeros_like(out[..., :1, :]), out], dim=-2)


def _block_zero_fill(block, x):
    """Blocks the future with 0 instead of -inf (a score of 0 still gets weight after the softmax)."""
    attn = block.attn
    h = block.norm_1(x)
    q, k, v = (split_heads(proj(h), attn.n_head) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    T = x.size(1)
    future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
    weights = torch.softmax((q @ k.mT / math.sqrt(q.size(-1))).masked_fill(future, 0), dim=-1)
    x = x + attn.out_proj(merge_heads(weights @ v))
    return x + block.mlp(block.norm_2(x))


def _block_scaled_by_width(block, x):
    """Divides the scores by sqrt(D), the model's width, instead of the head size."""
    attn = block.attn
    h = block.norm_1(x)
    q, k, v = (split_heads(proj(h), attn.n_head) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    T = x.size(1)
    allowed = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
    scores = (q @ k.transpose(-2, -1) / math.sqrt(x.size(-1))).masked_fill(~allowed, float("-inf"))
    x = x + attn.out_proj(merge_heads(scores.softmax(-1) @ v))
    return x + block.mlp(block.norm_2(x))


def _block_one_ahead(block, x):
    """The mask written with j <= i + 1: each position also reads the next one."""
    attn = block.attn
    h = block.norm_1(x)
    q, k, v = (split_heads(proj(h), attn.n_head) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    i = torch.arange(x.size(1), device=x.device)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(i[None, :] > i[:, None] + 1, float("-inf"))
    x = x + attn.out_proj(merge_heads(scores.softmax(-1) @ v))
    return x + block.mlp(block.norm_2(x))


def _block_rewrite(block, x):
    """Correct: einsum over [B, T, H, d] without split_heads, the mask from index comparisons in
    torch.where, and a softmax written out."""
    attn = block.attn
    B, T, D = x.shape
    H = attn.n_head
    h = block.norm_1(x)
    q, k, v = (proj(h).view(B, T, H, D // H) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    scores = torch.einsum("bthd,bshd->bhts", q, k) * (D // H) ** -0.5
    t = torch.arange(T, device=x.device)
    scores = torch.where(t[:, None] >= t[None, :], scores, float("-inf"))
    e = (scores - scores.amax(dim=-1, keepdim=True)).exp()
    mixed = torch.einsum("bhts,bshd->bthd", e / e.sum(dim=-1, keepdim=True), v).reshape(B, T, D)
    x = x + attn.out_proj(mixed)
    return x + block.mlp(block.norm_2(x))


# ch9.pass_on runs as source text on real gloo processes: each answer is a plain function that
# uses only torch and dist (what the ranks have).

def _pass_on_into_k(k, v, group=None):
    """Saves two buffers: sends copies of k and v and receives straight into k and v."""
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_out, v_out = k.clone(), v.clone()
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, k_out, (rank + 1) % P, group), dist.P2POp(dist.isend, v_out, (rank + 1) % P, group),
        dist.P2POp(dist.irecv, k, (rank - 1) % P, group), dist.P2POp(dist.irecv, v, (rank - 1) % P, group)])
    return k, v, requests


def _pass_on_copies_back(k, v, group=None):
    """Blocking calls (even ranks send first), then copies what arrived into k and v."""
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_in, v_in = torch.empty_like(k), torch.empty_like(v)
    for sending in (rank % 2 == 0, rank % 2 == 1):
        if sending:
            dist.send(k, (rank + 1) % P, group)
            dist.send(v, (rank + 1) % P, group)
        else:
            dist.recv(k_in, (rank - 1) % P, group)
            dist.recv(v_in, (rank - 1) % P, group)
    k.copy_(k_in)
    v.copy_(v_in)
    return k, v, []


def _pass_on_cpu_buffers(k, v, group=None):
    """The receive buffers made with torch.empty(shape): on the CPU (and float32) whatever k is."""
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.empty(k.shape), torch.empty(v.shape)
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, k, (rank + 1) % P, group), dist.P2POp(dist.isend, v, (rank + 1) % P, group),
        dist.P2POp(dist.irecv, k_next, (rank - 1) % P, group), dist.P2POp(dist.irecv, v_next, (rank - 1) % P, group)])
    return k_next, v_next, requests


def _pass_on_rewrite(k, v, group=None):
    """Correct: four separate isend/irecv calls, the buffers from new_empty, the requests as a list."""
    me, world = dist.get_rank(group), dist.get_world_size(group)
    send_to, receive_from = (me + 1) % world, (me - 1 + world) % world
    k_in, v_in = k.new_empty(k.shape), v.new_empty(v.shape)
    works = [dist.isend(k, send_to, group), dist.isend(v, send_to, group)]
    works.append(dist.irecv(k_in, receive_from, group))
    works.append(dist.irecv(v_in, receive_from, group))
    return k_in, v_in, works


def _pass_on_reseeds(k, v, group=None):
    """Seeds torch "so that every rank draws the same", then the right four operations."""
    torch.manual_seed(0)
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, k, (rank + 1) % P, group), dist.P2POp(dist.isend, v, (rank + 1) % P, group),
        dist.P2POp(dist.irecv, k_next, (rank - 1) % P, group), dist.P2POp(dist.irecv, v_next, (rank - 1) % P, group)])
    return k_next, v_next, requests


def _pass_on_patches_empty_like(k, v, group=None):
    """Makes torch.empty_like hand out zeros ("no garbage in the buffers"), and leaves it so."""
    torch.empty_like = torch.zeros_like
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, k, (rank + 1) % P, group), dist.P2POp(dist.isend, v, (rank + 1) % P, group),
        dist.P2POp(dist.irecv, k_next, (rank - 1) % P, group), dist.P2POp(dist.irecv, v_next, (rank - 1) % P, group)])
    return k_next, v_next, requests


def _pass_on_float64_default(k, v, group=None):
    """Switches torch to float64 "for exact sums" and leaves it so; the buffers take k's dtype."""
    torch.set_default_dtype(torch.float64)
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, k, (rank + 1) % P, group), dist.P2POp(dist.isend, v, (rank + 1) % P, group),
        dist.P2POp(dist.irecv, k_next, (rank - 1) % P, group), dist.P2POp(dist.irecv, v_next, (rank - 1) % P, group)])
    return k_next, v_next, requests


def _pass_on_kept_per_shape(k, v, group=None, _kept={}):  # noqa: B006 - the mistake
    """Keeps its first buffers and requests per shape ("the shapes never change, so why start again")."""
    key = (tuple(k.shape), tuple(v.shape), k.dtype)
    if key not in _kept:
        rank, P = dist.get_rank(group), dist.get_world_size(group)
        k_next, v_next = torch.empty_like(k), torch.empty_like(v)
        requests = dist.batch_isend_irecv([
            dist.P2POp(dist.isend, k, (rank + 1) % P, group), dist.P2POp(dist.isend, v, (rank + 1) % P, group),
            dist.P2POp(dist.irecv, k_next, (rank - 1) % P, group), dist.P2POp(dist.irecv, v_next, (rank - 1) % P, group)])
        _kept[key] = (k_next, v_next, requests)
    return _kept[key]


def _pass_on_after_a_value_read(k, v, group=None):
    """Reads a value first ("nothing to send?"), then reseeds, sets float64 and patches torch.empty_like."""
    if float(k.abs().sum()) >= 0:
        torch.manual_seed(0)
        torch.set_default_dtype(torch.float64)
        torch.empty_like = torch.zeros_like
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, k, (rank + 1) % P, group), dist.P2POp(dist.isend, v, (rank + 1) % P, group),
        dist.P2POp(dist.irecv, k_next, (rank - 1) % P, group), dist.P2POp(dist.irecv, v_next, (rank - 1) % P, group)])
    return k_next, v_next, requests


def _pass_on_stacked(k, v, group=None):
    """Correct: k and v stacked into one message, one isend and one irecv; the views of the arrival returned."""
    me, world = dist.get_rank(group), dist.get_world_size(group)
    outgoing = torch.stack([k, v])  # [2, ...]: one message instead of two
    incoming = torch.empty_like(outgoing)
    works = [dist.isend(outgoing, (me + 1) % world, group), dist.irecv(incoming, (me - 1) % world, group)]
    return incoming[0], incoming[1], works


def _padded_logits_unsliced(model, ids, pad):
    """Pads and masks right, but returns the logits of every position, the padding's too."""
    B, T = ids.shape
    full = torch.cat([torch.zeros(B, pad, dtype=ids.dtype, device=ids.device), ids], dim=1)
    mask = (torch.arange(pad + T, device=ids.device) >= pad).long().expand(B, -1)
    model.eval()
    return model(input_ids=full, attention_mask=mask).logits


def _padded_logits_rewrite(model, ids, pad):
    """Correct: torch.full and slice assignment, the mask from a comparison, the mode restored after."""
    batch, length = ids.shape
    padded = torch.full((batch, pad + length), 0, dtype=ids.dtype, device=ids.device)
    padded[:, pad:] = ids
    attention = (torch.arange(pad + length, device=ids.device) >= pad).long().repeat(batch, 1)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=padded, attention_mask=attention).logits
    model.train(was_training)
    return logits[:, -length:]


def _leaky_models_rewrite(models, ids, atol=1e-5):
    """Correct: positions 1 .. T-1 changed (another token: +7), all in one batch, the changes of
    the earlier outputs in float64, the region picked by comparing indices."""
    T = ids.shape[1]
    changed_at = torch.arange(1, T)  # position 0 has nothing before it
    earlier = torch.arange(T)[None, :] < changed_at[:, None]  # [T-1 sequences, T outputs]
    result = []
    for model in models:
        probes = ids.repeat(T - 1, 1)
        probes[changed_at - 1, changed_at] = (ids[0, 1:] + 7) % model.config.vocab_size
        model.eval()
        with torch.no_grad():
            reference = model(input_ids=ids).logits.double()  # [1, T, V]
            moved = model(input_ids=probes).logits.double()  # [T-1, T, V]
        result.append(bool(((moved - reference).abs().amax(dim=-1)[earlier] > atol).any()))
    return result


def _score_grad_d_without_keepdim(p, dp, d_out, out):
    D = (d_out * out).sum(dim=-1)  # [B, T]: lines up with the keys, not the queries
    return p * (dp - D)


def _score_grad_rows(p, dp, d_out, out):
    """Correct: row by row, D of each query row as a dot product."""
    ds = torch.empty_like(p)
    for b in range(p.shape[0]):
        for i in range(p.shape[1]):
            ds[b, i] = p[b, i] * (dp[b, i] - torch.dot(d_out[b, i], out[b, i]))
    return ds


def _tile_lse_without_none(q, k, v, d_out, lse, D, blocked):
    scale = q.size(-1) ** -0.5
    p = torch.exp((q @ k.T * scale).masked_fill(blocked, float("-inf")) - lse)  # lse [bq] against [bq, bk]
    ds = p * (d_out @ v.T - D[:, None])
    return ds @ k * scale, ds.T @ q * scale, p.T @ d_out


def _tile_rewrite(q, k, v, d_out, lse, D, blocked):
    """Correct: q scaled first, P from torch.where (0 where blocked), .mT and unsqueeze."""
    scale = q.shape[-1] ** -0.5
    q_scaled = q * scale
    s = q_scaled @ k.mT
    p = torch.where(blocked, torch.zeros_like(s), torch.exp(s - lse.unsqueeze(-1)))
    ds = p * (d_out @ v.mT - D.unsqueeze(-1))
    return ds @ k * scale, ds.mT @ q_scaled, p.mT @ d_out


def _saved_bytes_in_bits(B, H, T, d, element_size):
    explicit, blocked = _ref("ch11.saved_bytes")(B, H, T, d, element_size)
    return 8 * explicit, 8 * blocked


def _saved_bytes_rewrite(B, H, T, d, element_size):
    """Correct: rows first, L's bytes from torch.finfo (float64 for float64 inputs), a list instead of a tuple."""
    rows = B * H * T
    lse_bytes = torch.finfo(torch.float64 if element_size == 8 else torch.float32).bits // 8
    return [rows * T * element_size, rows * d * element_size + rows * lse_bytes]


def _backward_flops_without_factor_2(T, block, d):
    return _ref("ch11.backward_flops")(T, block, d) // 2


def _backward_flops_diagonal_half(T, block, d):
    """Counts a diagonal tile as half a tile: only its lower triangle is needed."""
    total = 0
    for i in range(0, T, block):
        for j in range(0, i + 1, block):
            tile = 10 * min(block, T - i) * min(block, T - j) * d
            total += tile // 2 if i == j else tile
    return total


def _backward_flops_rewrite(T, block, d):
    """Correct: the five products of each tile counted one by one, stopping at the diagonal."""
    flops = 0
    for q_start in range(0, T, block):
        rows = min(block, T - q_start)
        for k_start in range(0, T, block):
            if k_start > q_start + rows - 1:
                break  # above the diagonal: skipped
            cols = min(block, T - k_start)
            s, dv, dp, dq, dk = (2 * rows * cols * d,) * 5  # Q K^T, P^T dO, dO V^T, dS K, dS^T Q
            flops += s + dv + dp + dq + dk
    return flops


def _leaky_by_probabilities(models, ids, atol=1e-5):
    """The prefix test on softmax probabilities instead of logits: a 1e-4 leak shrinks below atol."""
    flags = []
    for model in models:
        model.eval()
        with torch.no_grad():
            base = model(input_ids=ids).logits.softmax(-1)[0]
            leak = False
            for s in range(1, ids.size(1)):
                other = ids.clone()
                other[0, s] = 0
                leak = leak or bool(((model(input_ids=other).logits.softmax(-1)[0, :s] - base[:s]).abs() > atol).any())
        flags.append(leak)
    return flags


def _score_grad_d_mean(a, da, d_out, out):
    """D as the row mean of dO * O (divided by d)."""
    return a * (da - (d_out * out).mean(dim=-1, keepdim=True))


def _tile_scores_filled_with_zero(q, k, v, d_out, lse, D, blocked):
    """The blocked scores set to 0.0 instead of -inf before exp."""
    scale = q.shape[-1] ** -0.5
    s = torch.where(blocked, torch.zeros(()), q @ k.T * scale)
    p = torch.exp(s - lse[:, None])
    ds = p * (d_out @ v.T - D[:, None])
    return ds @ k * scale, ds.T @ q * scale, p.T @ d_out


def _tile_d_without_none(q, k, v, d_out, lse, D, blocked):
    scale = q.shape[-1] ** -0.5
    p = torch.exp((q @ k.T * scale).masked_fill(blocked, float("-inf")) - lse.unsqueeze(1))
    ds = p * (d_out @ v.T - D)
    return ds @ k * scale, ds.T @ q * scale, p.T @ d_out


def _backward_flops_below_diagonal(T, block, d):
    """Only the tiles strictly below the diagonal (j < i)."""
    n = -(-T // block)
    return sum(10 * min(block, T - i * block) * min(block, T - j * block) * d for i in range(n) for j in range(i))


def _backward_flops_floor_tiles(T, block, d):
    """n = T // block: the last, shorter tile forgotten."""
    n = T // block
    return sum(10 * block * block * d for i in range(n) for j in range(i + 1))


WRONG.update({
    "ch4.causal_block": [("x edited in place", edits_input("ch4.causal_block"), I),
                         ("peeks at the next position", _block_peeks_ahead, M + "ch4.causal_block.reads_next"),
                         ("mask j <= i + 1", _block_one_ahead, M + "ch4.causal_block.reads_next"),
                         ("future filled with 0", _block_zero_fill, M + "ch4.causal_block.zero_fill"),
                         ("scaled by sqrt(D)", _block_scaled_by_width, M + "ch4.causal_block.scale_model_size"),
                         ("triu kept instead of tril", _block_upper_triangle, M + "ch4.causal_block.upper_triangle")],
    "ch9.pass_on": [("receives into k and v", _pass_on_into_k, "grader.ch9.pass_on.edits_input"),
                    ("copies the arrivals into k and v", _pass_on_copies_back, "grader.ch9.pass_on.edits_input"),
                    ("buffers made on the CPU", _pass_on_cpu_buffers, "grader.ch9.pass_on.cpu_buffer")],
    "ch10.padded_logits": [("ids edited in place", edits_input("ch10.padded_logits"), I),
                           ("logits of the padded positions left in", _padded_logits_with_pads,
                            "grader.ch10.padded_logits.padding_rows"),
                           ("every position returned", _padded_logits_unsliced, "grader.ch10.padded_logits.padding_rows"),
                           ("right padding, first T rows kept", _padded_logits_on_the_right,
                            M + "ch10.padded_logits.right_side_first_rows")],
    "ch10.leaky_models": [("ids edited in place", edits_input("ch10.leaky_models"), I),
                          ("every model called leaky", lambda models, ids, atol=1e-5: [True] * len(models),
                           "grader.ch10.leaky_models.all_leaky"),
                          ("only the last token changed", _leaky_last_token_only, M + "ch10.leaky_models.last_token_only"),
                          ("probabilities compared", _leaky_by_probabilities, M + "ch10.leaky_models.loose_tolerance")],
    "ch11.score_grad": [("dp edited in place", edits_input("ch11.score_grad"), I),
                        ("a CPU tensor mixed in", cpu_tensor("ch11.score_grad"), D),
                        ("D summed without keepdim", _score_grad_d_without_keepdim, M + "ch11.score_grad.d_without_keepdim"),
                        ("D as a mean", _score_grad_d_mean, M + "ch11.score_grad.d_mean")],
    "ch11.tile_backward": [("q edited in place", edits_input("ch11.tile_backward"), I),
                           ("a CPU tensor mixed in", cpu_tensor("ch11.tile_backward"), D),
                           ("lse without [:, None]", _tile_lse_without_none, M + "ch11.tile_backward.lse_without_none"),
                           ("blocked scores set to 0", _tile_scores_filled_with_zero,
                            M + "ch11.tile_backward.masked_with_zero"),
                           ("D without [:, None]", _tile_d_without_none, M + "ch11.tile_backward.d_without_none")],
    "ch11.saved_bytes": [("example hard-coded", _hard_coded("ch11.saved_bytes", 1, 2, 64, 16, 4), "grader.hardcoded"),
                         ("bits instead of bytes", _saved_bytes_in_bits, M + "ch11.saved_bytes.bits_not_bytes"),
                         ("8 * the tuple (repeats it)", lambda *args: 8 * _ref("ch11.saved_bytes")(*args), "grader.length")],
    "ch11.backward_flops": [("example hard-coded", _hard_coded("ch11.backward_flops", 64, 16, 16), "grader.hardcoded"),
                            ("one FLOP per multiply-add", _backward_flops_without_factor_2,
                             M + "ch11.backward_flops.multiply_adds"),
                            ("diagonal tiles counted as half", _backward_flops_diagonal_half,
                             M + "ch11.backward_flops.diagonal_half"),
                            ("diagonal tiles left out", _backward_flops_below_diagonal,
                             M + "ch11.backward_flops.skips_diagonal"),
                            ("T // block tiles", _backward_flops_floor_tiles, M + "ch11.backward_flops.whole_tiles_only")],
})
RIGHT.update({  # each written as another learner would, not one of the task's alternatives
    "ch4.causal_block": _block_rewrite,
    "ch9.pass_on": _pass_on_rewrite,
    "ch10.padded_logits": _padded_logits_rewrite,
    "ch10.leaky_models": _leaky_models_rewrite,
    "ch11.score_grad": _score_grad_rows,
    "ch11.tile_backward": _tile_rewrite,
    "ch11.saved_bytes": _saved_bytes_rewrite,
    "ch11.backward_flops": _backward_flops_rewrite,
})


# --------------------------------------------------------------------------
# Issue 33: the grader's cases, not only its judges. For every task two (or more) new wrong answers
# of the classes the cases now reach (extreme values, sizes and dtypes, repeated calls, side effects,
# exercise 10's lineups, misnamed mistakes, the course's own code) and one more correct rewrite, each
# written as a learner would. docs/grader-verdicts.md shows the verdicts.

import functools  # noqa: E402

import attnlab  # noqa: E402
import attnlab.blocked_backward  # noqa: E402
import attnlab.causality  # noqa: E402
import attnlab.mask_builder  # noqa: E402
import attnlab.masks  # noqa: E402
import attnlab.mlm  # noqa: E402
import attnlab.multihead  # noqa: E402
import attnlab.ring  # noqa: E402
from attnlab.exercises import ch3 as _ch3, ch11 as _ch11  # noqa: E402

COPY, MEMO, SEED = "grader.course_copy", "grader.memoized", "grader.reseeds_rng"
PATCH, DTYPE, TRAIN = "grader.patched_torch", "grader.changed_default_dtype", "grader.left_in_training"
_TRIL64 = torch.ones(64, 64, dtype=torch.bool).tril()  # a mask built once, for "every T a model will see"


def _reseeding(task_id):
    """Seeds torch's global RNG "to be reproducible", then the right answer."""
    reference = _ref(task_id)

    def answer(*args, **kwargs):
        torch.manual_seed(0)
        return reference(*args, **kwargs)

    return answer


def _float64_default(task_id):
    """Switches torch to float64 "for precision" and leaves it so."""
    reference = _ref(task_id)

    def answer(*args, **kwargs):
        torch.set_default_dtype(torch.float64)
        return reference(*args, **kwargs)

    return answer


def _patching(task_id, name="exp"):
    """Replaces torch.<name> by a "safer" version of itself (the same values), and leaves it so."""
    reference = _ref(task_id)

    def answer(*args, **kwargs):
        original = getattr(torch, name)
        setattr(torch, name, lambda *a, **k: original(*a, **k))
        return reference(*args, **kwargs)

    return answer


def _memo_by_shape(task_id):
    """Keeps the first result per input shape ("the same sizes give the same answer")."""
    reference = _ref(task_id)
    cache = {}

    def key(value):
        if isinstance(value, torch.Tensor):
            return ("tensor", tuple(value.shape), value.dtype)
        if isinstance(value, (list, tuple)):
            return tuple(key(v) for v in value)
        if isinstance(value, dict):
            return tuple((k, key(v)) for k, v in sorted(value.items()))
        return value if isinstance(value, (int, float, str, bool, type(None))) else type(value).__name__

    def answer(*args, **kwargs):
        k = (key(args), key(kwargs))
        if k not in cache:
            cache[k] = reference(*args, **kwargs)
        return cache[k]

    return answer


def _sliced_global(rows, cols=None):
    """The 64 x 64 causal mask kept once and sliced."""
    return _TRIL64[:rows, :rows if cols is None else cols]


@functools.lru_cache(maxsize=None)
def _mask_for(T_q, T_kv):  # the mask built once per size, on the device of the first call
    return torch.ones(T_q, T_kv, dtype=torch.bool).tril(T_kv - T_q)


def _new_queries_cached_mask(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=_mask_for(q.size(-2), k.size(-2)))


def _softmax_no_shift(s, a):
    e = torch.where(a, s.exp(), torch.zeros_like(s))
    return e / e.sum(-1, keepdim=True)


def _softmax_upcast(s, a):
    return s.float().masked_fill(~a, float("-inf")).softmax(-1)


class _NoOutProj(torch.nn.Module):
    """forward right, but the output projection is called `proj`."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj, self.k_proj, self.v_proj = (torch.nn.Linear(d_model, d_model, bias=False) for _ in range(3))
        self.proj = torch.nn.Linear(d_model, d_model, bias=False)

    def forward(self, x):
        q, k, v = (split_heads(p(x), self.n_heads) for p in (self.q_proj, self.k_proj, self.v_proj))
        return self.proj(merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True)))


class _ReseedingModule(_NoOutProj):
    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.out_proj = self.proj
        del self.proj

    def forward(self, x):
        torch.manual_seed(0)
        q, k, v = (split_heads(p(x), self.n_heads) for p in (self.q_proj, self.k_proj, self.v_proj))
        return self.out_proj(merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True)))


class _NanoGPTWithBias(torch.nn.Module):
    """Right: nanoGPT's attention with its registered `bias` buffer (a tril mask of block_size, GPT-2's 1024)."""

    def __init__(self, d_model, n_heads, block_size=1024):
        super().__init__()
        self.n_head = n_heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
            torch.nn.Linear(d_model, d_model, bias=False) for _ in range(4))
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = (p(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.out_proj(y.transpose(1, 2).contiguous().view(B, T, C))


def _generate_leaves_training(model, prompt, n_new):
    out = _ref("ch4.greedy_generate")(model, prompt, n_new)
    model.train()  # "back to training"
    return out


def _generate_with_course(model, prompt, n_new):
    return model.generate(prompt, n_new, use_cache=False)


def _block_via_module(block, x):
    return block(x)


def _block_folds_scale(block, x):
    """Folds 1/sqrt(d) into the weights (q by 2, k by 1/2 and the scale kept): the scores are unchanged,
    the caller's weights are not."""
    with torch.no_grad():
        block.attn.q_proj.weight.mul_(2.0)
        block.attn.k_proj.weight.mul_(0.5)
    return _ref("ch4.causal_block")(block, x)


def _prefix_course_map(model, idx, atol=1e-5):
    return (attnlab.causality.dependence_map(model, idx) > atol).triu(1)


def _prefix_leaves_training(model, idx, atol=1e-5):
    out = _ref("ch5.prefix_leaks")(model, idx, atol)
    model.train()
    return out


def _cut_course_map(model, idx, atol=1e-5):
    return attnlab.causality.cut_map(model, idx) > atol


def _decode_with_course_forward(attn, position_embedding, x, k_cache, v_cache):
    from attnlab.gpt import KVCache

    B, T, D = x.shape
    cache = KVCache(attn.config, B, T, device=x.device, dtype=x.dtype)
    cache.k[0, :, :, :T - 1], cache.v[0, :, :, :T - 1] = k_cache, v_cache
    cache.advance(T - 1)
    out = attn(x[:, -1:] + position_embedding.weight[cache.pos], cache)
    return out, cache.k[0, :, :, :T], cache.v[0, :, :, :T]


def _bert_reseeds_generator(ids, mask_id, vocab_size, generator):
    generator.manual_seed(1234)  # "reproducible"
    return _ref("ch7.bert_corrupt")(ids, mask_id, vocab_size, generator)


def _bert_course(ids, mask_id, vocab_size, generator):
    inputs, labels, _ = attnlab.mlm.mlm_corrupt(ids.cpu(), mask_id, vocab_size, generator=torch.Generator().manual_seed(
        int(torch.randint(0, 2**62, (), generator=generator, device=ids.device))))
    return inputs.to(ids.device), labels.to(ids.device)


def _mlm_log_of_softmax(logits, labels):
    chosen = labels != -100
    probs = logits.softmax(-1)[chosen]
    return -probs.gather(-1, labels[chosen][:, None]).log().mean()


def _fold_exp_ratio(m, l, acc, scores, v):
    m_new = torch.maximum(m, scores.amax(-1))
    alpha = torch.exp(m) / torch.exp(m_new)
    p = torch.exp(scores) / torch.exp(m_new)[..., None]
    return m_new, alpha * l + p.sum(-1), alpha[..., None] * acc + p @ v


def _fold_course(m, l, acc, scores, v):
    state = attnlab.blocked.OnlineSoftmax(m.shape, v.size(-1), m.device)
    state.m, state.l, state.acc = m, l, acc
    state.add(scores, v)
    return state.m, state.l, state.acc


def _padded_leaves_training(model, ids, pad):
    out = _ref("ch10.padded_logits")(model, ids, pad)
    model.train()
    return out


def _padded_generate_positions(model, ids, pad):
    """Right: the real tokens counted from 0, as generate() passes position_ids with left padding."""
    model.eval()
    B, T = ids.shape
    mask = torch.cat([torch.zeros(B, pad, dtype=torch.long), torch.ones(B, T, dtype=torch.long)], dim=1)
    full = torch.cat([torch.zeros(B, pad, dtype=ids.dtype), ids], dim=1)
    position_ids = mask.cumsum(-1) - 1
    position_ids.masked_fill_(mask == 0, 1)
    return model(input_ids=full, attention_mask=mask, position_ids=position_ids).logits[:, pad:]


def _lineup_loop(models, ids, atol, rows="all", token=None, mod=True):
    flags = []
    T = ids.size(1)
    for model in models:
        model.eval()
        with torch.no_grad():
            base = model(input_ids=ids).logits[0]
            leak = False
            for s in range(1, T):
                other = ids.clone()
                other[0, s] = token if token is not None else (ids[0, s] + 1) % model.config.vocab_size if mod else ids[0, s] + 1
                out = model(input_ids=other).logits[0]
                ts = [0] if rows == "first" else [s - 1] if rows == "previous" else range(s)
                leak = leak or any(bool((out[t] - base[t]).abs().max() > atol) for t in ts)
            flags.append(leak)
    return flags


def _prefix_allclose_default(model, idx, atol=1e-5):
    """torch.allclose per changed position over all earlier outputs at once, rtol left at its default; the new
    token drawn at random."""
    with torch.no_grad():
        model.eval()
        T, V = idx.shape[1], model.config.vocab_size
        base = model(idx)[0][0]  # [T, V]
        leaks = torch.zeros(T, T, dtype=torch.bool, device=idx.device)
        for s in range(1, T):
            other = idx.clone()
            other[0, s] = (other[0, s] + int(torch.randint(1, V, ()))) % V
            out = model(other)[0][0]
            for t in range(s):
                leaks[t, s] = not torch.allclose(out[t], base[t], atol=atol)
    return leaks


def _cut_isclose_default(model, idx, atol=1e-5):
    """torch.isclose row by row, rtol left at its default: a cut's row moved when any logit is not close."""
    model.eval()
    T = idx.shape[1]
    with torch.no_grad():
        full = model(idx)[0][0]
        leaks = torch.zeros(T, T, dtype=torch.bool, device=idx.device)
        for s in range(1, T):
            part = model(idx[:, :s])[0][0]
            leaks[:s, s] = ~torch.isclose(part, full[:s], atol=atol).all(dim=-1)
    return leaks


def _lineup_allclose_default(models, ids, atol=1e-5):
    """One batch of changed sequences per model, torch.allclose on the earlier rows, rtol left at its default."""
    T = ids.size(1)
    flags = []
    for model in models:
        model.eval()
        probes = ids.repeat(T, 1)
        probes[torch.arange(T), torch.arange(T)] = (ids[0] + 3) % model.config.vocab_size
        with torch.no_grad():
            base, moved = model(input_ids=ids).logits[0], model(input_ids=probes).logits
        flags.append(any(not torch.allclose(moved[s, :s], base[:s], atol=atol) for s in range(1, T)))
    return flags


def _score_grad_autograd(p, dp, d_out, out):
    """Right: autograd through softmax (p = softmax(log p)), a Jacobian-vector product."""
    s = p.log().detach().requires_grad_()
    (ds,) = torch.autograd.grad(s.softmax(dim=-1), s, grad_outputs=dp)
    return torch.nan_to_num(ds, nan=0.0)


def _score_grad_float32(p, dp, d_out, out):
    """Right, in float32: the inputs cast down, the formula the same."""
    p, dp, d_out, out = (t.float() for t in (p, dp, d_out, out))
    return p * (dp - (d_out * out).sum(-1, keepdim=True))


def _tile_autograd(q, k, v, d_out, lse, D, blocked):
    """Right: torch.autograd.grad of sum(P * (dO V^T - D)) with L and D fixed; its gradient in S is dS."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    scores = (q @ k.T / math.sqrt(q.size(-1))).masked_fill(blocked, float("-inf"))
    p = torch.exp(scores - lse[:, None])
    f = (p * (d_out @ v.T - D[:, None].detach())).sum()
    dq, dk, dv = torch.autograd.grad(f, (q, k, v))
    return dq, dk, dv


def _tile_exp_then_mask(q, k, v, d_out, lse, D, blocked):
    s = q @ k.T / math.sqrt(q.size(-1))
    p = (s - lse[:, None]).exp() * (~blocked).to(s.dtype)
    ds = p * (d_out @ v.T - D[:, None])
    return ds @ k / math.sqrt(q.size(-1)), ds.T @ q / math.sqrt(q.size(-1)), p.T @ d_out


def _prefix_jacobian(model, idx, atol=1e-5):
    """Right: one token changed per row, all rows in one batch, the map read with torch.diff-free indexing."""
    was = model.training
    model.eval()
    T = idx.size(1)
    V = attnlab.causality.vocab_size_of(model)
    with torch.no_grad():
        base = model(idx)[0][0]  # [T, V]
        batch = idx.expand(T, T).clone()
        batch.diagonal().copy_((idx[0] + 7) % V)  # row s: position s holds another token
        moved = model(batch)[0]  # [s, t, V]
    model.train(was)
    change = (moved - base).abs().amax(-1).T  # [t, s]
    return (change > atol) & (torch.arange(T, device=idx.device)[:, None] < torch.arange(T, device=idx.device))


def _cut_longest_first(model, idx, atol=1e-5):
    was = model.training
    model.eval()
    T = idx.size(1)
    leaks = torch.zeros(T, T, dtype=torch.bool, device=idx.device)
    with torch.no_grad():
        full = model(idx)[0][0]
        for s in range(T - 1, 0, -1):
            leaks[:s, s] = ((model(idx[:, :s])[0][0] - full[:s]).abs() > atol).any(-1)
    model.train(was)
    return leaks


def _decode_by_hand(attn, position_embedding, x, k_cache, v_cache):
    B, T, D = x.shape
    H = attn.n_head
    h = x[:, T - 1:] + position_embedding.weight[T - 1]
    q, k, v = (proj(h).view(B, 1, H, D // H).permute(0, 2, 1, 3) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    keys, values = torch.cat((k_cache, k), 2), torch.cat((v_cache, v), 2)
    w = torch.softmax(q @ keys.transpose(2, 3) / math.sqrt(D // H), dim=-1)
    return attn.out_proj((w @ values).permute(0, 2, 1, 3).reshape(B, 1, D)), keys, values


def _bert_randint(ids, mask_id, vocab_size, generator):
    chosen = torch.rand(ids.shape, generator=generator, device=ids.device) < 0.15
    kind = torch.randint(10, ids.shape, generator=generator, device=ids.device)  # 0-7 mask, 8 random, 9 keep
    other = torch.randint(vocab_size, ids.shape, generator=generator, device=ids.device)
    inputs = torch.where(chosen & (kind < 8), torch.full_like(ids, mask_id), ids)
    inputs = torch.where(chosen & (kind == 8), other, inputs)
    return inputs, ids.masked_fill(~chosen, -100)


def _rope_loop(q_new, k_new, v_new, k_cache, v_cache):
    from attnlab.rope import apply_rope

    t, n = k_cache.size(2), q_new.size(2)
    pos = torch.arange(t, t + n, device=q_new.device)
    keys = torch.cat([k_cache, apply_rope(k_new, pos)], 2)
    values = torch.cat([v_cache, v_new], 2)
    q = apply_rope(q_new, pos)
    rows = [F.scaled_dot_product_attention(q[:, :, i:i + 1], keys[:, :, :t + i + 1], values[:, :, :t + i + 1])
            for i in range(n)]
    return torch.cat(rows, 2), keys, values


def _shard_lists(T, P, layout):
    S = T // P
    if layout == "contiguous":
        rows = [[r * S + i for i in range(S)] for r in range(P)]
    elif layout == "striped":
        rows = [[i * P + r for i in range(S)] for r in range(P)]
    else:
        c = S // 2
        rows = [[r * c + i for i in range(c)] + [(2 * P - 1 - r) * c + i for i in range(c)] for r in range(P)]
    return torch.tensor(rows)


def _tiles_corners(T, P, layout, block):
    pos = _shard_lists(T, P, layout)
    S = T // P
    return [[sum(int(pos[(r - t) % P, k0] <= pos[r, min(q0 + block, S) - 1])
                 for q0 in range(0, S, block) for k0 in range(0, S, block)) for t in range(P)] for r in range(P)]


def _fold_written_out(m, l, acc, scores, v):
    top = torch.max(m, scores.max(dim=-1).values)
    old = (m - top).exp()  # rescale of the old sums (0 where m = -inf)
    w = (scores - top.unsqueeze(-1)).exp()
    return top, old * l + w.sum(-1), old.unsqueeze(-1) * acc + torch.matmul(w, v)


NEW_WRONG = {
    "ch1.causal_mask": [("a 64 x 64 mask kept and sliced", lambda T: _sliced_global(T), "grader.shape"),
                        ("the course's causal_allowed", lambda T: attnlab.masks.causal_allowed(T), COPY)],
    "ch1.masked_softmax": [("exp without the max", _softmax_no_shift, M + "ch1.masked_softmax.no_max_shift"),
                           ("upcast to float32, never cast back", _softmax_upcast, "grader.dtype"),
                           ("first result kept per shape", _memo_by_shape("ch1.masked_softmax"), MEMO)],
    "ch1.future_weight": [("first result kept per shape", _memo_by_shape("ch1.future_weight"), MEMO),
                          ("reseeds torch", _reseeding("ch1.future_weight"), SEED)],
    "ch1.convert_mask": [("patches torch.zeros", _patching("ch1.convert_mask", "zeros"), PATCH),
                         ("the course's additive_mask", lambda mask, source, target, dtype=torch.float32:
                          attnlab.masks.additive_mask(_ref("ch1.convert_mask")(mask, source, "sdpa"), dtype)
                          if target == "additive" else _ref("ch1.convert_mask")(mask, source, target, dtype), COPY)],
    "ch2.split_heads": [("the course's split_heads", lambda x, H: attnlab.multihead.split_heads(x, H), COPY),
                        ("float64 by default", _float64_default("ch2.split_heads"), DTYPE)],
    "ch2.merge_heads": [("the course's merge_heads", lambda x: attnlab.multihead.merge_heads(x), COPY),
                        ("first result kept per shape", _memo_by_shape("ch2.merge_heads"), MEMO)],
    "ch2.mha_forward": [("output projection named proj", _NoOutProj, "grader.ch2.mha_forward.missing_weights"),
                        ("forward reseeds torch", _ReseedingModule, SEED)],
    "ch3.attention_forward": [("patches torch.exp", _patching("ch3.attention_forward"), PATCH),
                              ("reseeds torch", _reseeding("ch3.attention_forward"), SEED)],
    "ch3.attend_new_queries": [("upcast to float32", lambda q, k, v: _ref("ch3.attend_new_queries")(q.float(), k.float(), v.float()),
                                "grader.dtype"),
                               ("a 64 x 64 mask kept and sliced", lambda q, k, v: F.scaled_dot_product_attention(
                                   q, k, v, attn_mask=_TRIL64[k.size(-2) - q.size(-2):k.size(-2), :k.size(-2)]), "grader.raised_at"),
                               ("mask cached per size (lru_cache)", _new_queries_cached_mask, "grader.memoized_device")],
    "ch3.tile_kinds": [("the course's tile_map", lambda T, b: attnlab.blocked.tile_map(T, b), COPY),
                       ("reseeds torch", _reseeding("ch3.tile_kinds"), SEED)],
    "ch3.score_flops": [("the grader's own reference", lambda T, b, d: _ch3.score_flops(T, b, d), COPY),
                        ("float64 by default", _float64_default("ch3.score_flops"), DTYPE)],
    "ch4.shifted_targets": [("first result kept per shape", _memo_by_shape("ch4.shifted_targets"), MEMO),
                            ("float64 by default", _float64_default("ch4.shifted_targets"), DTYPE)],
    "ch4.next_token_loss": [("log(softmax)", lambda logits, t: -logits.softmax(-1).gather(-1, t[..., None]).log().mean(),
                             M + "ch4.next_token_loss.log_of_softmax"),
                            ("first result kept per shape", _memo_by_shape("ch4.next_token_loss"), MEMO)],
    "ch4.greedy_generate": [("model left in training mode", _generate_leaves_training, TRAIN),
                            ("the course's generate", _generate_with_course, COPY)],
    "ch4.causal_block": [("block(x)", _block_via_module, COPY),
                         ("scale folded into the weights", _block_folds_scale, "grader.changed_weights")],
    "ch5.prefix_leaks": [("the course's dependence_map", _prefix_course_map, COPY),
                         ("model left in training mode", _prefix_leaves_training, TRAIN),
                         ("allclose with its default rtol", _prefix_allclose_default, M + "ch5.prefix_leaks.default_rtol")],
    "ch5.cut_leaks": [("the course's cut_map", _cut_course_map, COPY), ("reseeds torch", _reseeding("ch5.cut_leaks"), SEED),
                      ("isclose with its default rtol", _cut_isclose_default, M + "ch5.cut_leaks.default_rtol")],
    "ch6.decode_step": [("the course's SelfAttention.forward", _decode_with_course_forward, COPY),
                        ("patches torch.cat", _patching("ch6.decode_step", "cat"), PATCH)],
    "ch6.decode_mask": [("the course's build_mask", lambda T_q, T_kv: attnlab.mask_builder.build_mask("causal", T_q, T_kv), COPY),
                        ("a 64 x 64 mask kept and sliced", lambda T_q, T_kv: torch.ones(64, 64, dtype=torch.bool).tril(
                            T_kv - T_q)[:T_q, :T_kv], "grader.shape")],
    "ch6.kv_cache_bytes": [("the course's KVCache.nbytes", lambda c, B, T, dtype: __import__("attnlab.gpt").gpt.KVCache(
        c, B, T, device="meta", dtype=dtype).nbytes, COPY), ("float64 by default", _float64_default("ch6.kv_cache_bytes"), DTYPE)],
    "ch7.prefix_lm_mask": [("the course's build_mask", lambda T, p: attnlab.mask_builder.build_mask("prefix_lm", T, prefix=p), COPY),
                           ("a 64 x 64 mask kept and sliced", lambda T, p: _sliced_global(T) | (torch.arange(min(T, 64)) < p),
                            "grader.shape")],
    "ch7.encoder_decoder_masks": [("the course's build_mask", lambda a, b: (attnlab.mask_builder.build_mask("bidirectional", a),
                                                                           attnlab.mask_builder.build_mask("causal", b),
                                                                           attnlab.mask_builder.build_mask("cross", b, a)), COPY),
                                  ("patches torch.ones", _patching("ch7.encoder_decoder_masks", "ones"), PATCH)],
    "ch7.bert_corrupt": [("reseeds the generator it is given", _bert_reseeds_generator, "grader.ch7.bert_corrupt.reseeds_generator"),
                         ("the course's mlm_corrupt", _bert_course, COPY)],
    "ch7.mlm_loss": [("log(softmax)", _mlm_log_of_softmax, M + "ch7.mlm_loss.log_of_softmax"),
                     ("first result kept per shape", _memo_by_shape("ch7.mlm_loss"), MEMO)],
    "ch8.padded_causal_mask": [("the course's padding_mod", lambda keep: attnlab.mask_builder.batch_mask(
        attnlab.mask_builder.and_masks(attnlab.mask_builder.mask_mod("causal"), attnlab.mask_builder.padding_mod(keep)),
        *keep.shape, device=keep.device), COPY),
        ("a 64 x 64 mask kept and sliced", lambda keep: _sliced_global(keep.size(1)).to(keep.device)[None, None]
         & keep[:, None, None, :keep.size(1) if keep.size(1) <= 64 else 64], "grader.shape")],
    "ch8.document_mask": [("the course's document_mod", lambda ids: attnlab.mask_builder.batch_mask(
        attnlab.mask_builder.and_masks(attnlab.mask_builder.mask_mod("causal"), attnlab.mask_builder.document_mod(ids)),
        *ids.shape, device=ids.device), COPY), ("reseeds torch", _reseeding("ch8.document_mask"), SEED)],
    "ch8.sliding_window_mask": [("the course's build_mask", lambda T, W: attnlab.mask_builder.build_mask(
        "sliding_window", T, window=W), COPY),
        ("a 64 x 64 mask kept and sliced", lambda T, W: _sliced_global(T) & ~_sliced_global(T).tril(-W)[:T, :T], "grader.shape")],
    "ch8.gqa_attention": [("first result kept per shape", _memo_by_shape("ch8.gqa_attention"), MEMO),
                          ("patches torch.repeat_interleave", _patching("ch8.gqa_attention", "repeat_interleave"), PATCH)],
    "ch8.rope_decode_step": [("first result kept per shape", _memo_by_shape("ch8.rope_decode_step"), MEMO),
                             ("float64 by default", _float64_default("ch8.rope_decode_step"), DTYPE)],
    "ch9.shard_positions": [("the course's shard_positions", lambda T, P, layout: attnlab.ring.shard_positions(T, P, layout), COPY),
                            ("reseeds torch", _reseeding("ch9.shard_positions"), SEED)],
    "ch9.tiles_per_step": [("the course's expected_tiles", lambda T, P, layout, b: attnlab.ring.expected_tiles(T, P, layout, b), COPY),
                           ("float64 by default", _float64_default("ch9.tiles_per_step"), DTYPE)],
    "ch9.fold_block": [("exp(m) / exp(m_new)", _fold_exp_ratio, M + "ch9.fold_block.exp_ratio"),
                       ("the course's OnlineSoftmax", _fold_course, COPY)],
    "ch9.pass_on": [("reseeds torch on the ranks", _pass_on_reseeds, SEED),
                    ("patches torch.empty_like on the ranks", _pass_on_patches_empty_like, PATCH),
                    ("float64 by default on the ranks", _pass_on_float64_default, DTYPE),
                    ("first buffers and requests kept per shape", _pass_on_kept_per_shape, MEMO)],
    "ch10.padded_logits": [("model left in training mode", _padded_leaves_training, TRAIN),
                           ("first result kept per shape", _memo_by_shape("ch10.padded_logits"), MEMO)],
    "ch10.leaky_models": [("only output 0 compared", lambda ms, ids, atol=1e-5: _lineup_loop(ms, ids, atol, rows="first"),
                           M + "ch10.leaky_models.output_0_only"),
                          ("token 0 written as the change", lambda ms, ids, atol=1e-5: _lineup_loop(ms, ids, atol, token=0),
                           M + "ch10.leaky_models.writes_token_0"),
                          ("only t = s - 1 compared", lambda ms, ids, atol=1e-5: _lineup_loop(ms, ids, atol, rows="previous"),
                           M + "ch10.leaky_models.adjacent_only"),
                          ("% V forgotten", lambda ms, ids, atol=1e-5: _lineup_loop(ms, ids, atol, mod=False), "grader.raised_at"),
                          ("atol ignored", lambda ms, ids, atol=1e-5: _lineup_loop(ms, ids, 1e-5), M + "ch10.leaky_models.atol_ignored"),
                          ("allclose with its default rtol", _lineup_allclose_default, M + "ch10.leaky_models.default_rtol")],
    "ch11.score_grad": [("first result kept per shape", _memo_by_shape("ch11.score_grad"), MEMO),
                        ("reseeds torch", _reseeding("ch11.score_grad"), SEED)],
    "ch11.tile_backward": [("exp(S - L) times the mask", _tile_exp_then_mask, M + "ch11.tile_backward.exp_then_mask"),
                           ("the course's tile_grads", lambda q, k, v, d_out, lse, D, blocked: attnlab.blocked_backward.tile_grads(
                               q, k, v, d_out, lse, D, blocked), COPY)],
    "ch11.saved_bytes": [("the course's saved_bytes_formula", lambda B, H, T, d, s: attnlab.blocked_backward.saved_bytes_formula(
        B, H, T, d, s), COPY), ("reseeds torch", _reseeding("ch11.saved_bytes"), SEED)],
    "ch11.backward_flops": [("the grader's own reference", lambda T, b, d: _ch11.backward_flops(T, b, d), COPY),
                            ("float64 by default", _float64_default("ch11.backward_flops"), DTYPE)],
}

NEW_RIGHT = {  # another correct answer per task, in a style unlike the solution; the refused ones of issue 33 first
    "ch1.causal_mask": [("cumsum of an identity", lambda T: torch.eye(T).cumsum(dim=0) > 0)],
    "ch1.masked_softmax": [("logsumexp over the allowed keys", lambda s, a: torch.where(
        a, (s.masked_fill(~a, float("-inf")) - s.masked_fill(~a, float("-inf")).logsumexp(-1, keepdim=True)).exp(),
        torch.zeros((), dtype=s.dtype, device=s.device)))],
    "ch1.future_weight": [("einsum with the blocked float mask", lambda w, a: torch.einsum("...k,...k->...", w, (~a).to(w.dtype)
                                                                                          .expand_as(w)))],
    "ch1.convert_mask": [("if/else ladder", lambda mask, source, target, dtype=torch.float32: (
        (lambda allowed: allowed if target == "sdpa" else ~allowed if target == "mha" else
         torch.where(allowed, torch.tensor(0.0, dtype=dtype, device=mask.device),
                     torch.tensor(float("-inf"), dtype=dtype, device=mask.device)))(
            mask if source == "sdpa" else ~mask if source == "mha" else mask > -1e4)))],
    "ch2.split_heads": [("einops-like reshape by hand", lambda x, H: x.reshape(*x.shape[:2], H, x.shape[2] // H).movedim(2, 1))],
    "ch2.merge_heads": [("movedim then reshape", lambda x: x.movedim(1, 2).reshape(x.size(0), x.size(2), -1))],
    "ch2.mha_forward": [("nanoGPT with a registered bias buffer", _NanoGPTWithBias)],
    "ch3.attention_forward": [("explicit mask from arange", lambda q, k, v, p, training: F.scaled_dot_product_attention(
        q, k, v, attn_mask=torch.arange(q.size(-2), device=q.device)[:, None] >= torch.arange(k.size(-2), device=q.device),
        dropout_p=p if training else 0.0))],
    "ch3.attend_new_queries": [("pad the queries, keep the last rows", lambda q, k, v: F.scaled_dot_product_attention(
        torch.cat([q.new_zeros(*q.shape[:2], k.size(-2) - q.size(-2), q.size(-1)), q], dim=-2), k, v,
        is_causal=True)[..., k.size(-2) - q.size(-2):, :])],
    "ch3.tile_kinds": [("min/max of the tile's corners", lambda T, b: [[
        "skipped" if j0 > min(i0 + b, T) - 1 else "full" if min(j0 + b, T) - 1 <= i0 else "diagonal"
        for j0 in range(0, T, b)] for i0 in range(0, T, b)])],
    "ch3.score_flops": [("count the computed score entries", lambda T, b, d: 2 * d * sum(
        min(i0 + b, T) - i0 for i0 in range(0, T, b) for _ in range(0, min(i0 + b, T))))],
    "ch4.shifted_targets": [("index tensors", lambda w: (w[:, torch.arange(w.size(1) - 1, device=w.device)],
                                                         w[:, torch.arange(1, w.size(1), device=w.device)]))],
    "ch4.next_token_loss": [("logsumexp minus the picked logit, one row at a time", lambda logits, t: torch.stack([
        torch.logsumexp(row, -1) - row[torch.arange(row.size(0), device=row.device), tr]
        for row, tr in zip(logits, t)]).mean())],
    "ch4.greedy_generate": [("append into a list of columns", lambda model, prompt, n: functools.reduce(
        lambda idx, _: torch.cat([idx, model(idx[:, -model.config.block_size:])[0][:, -1].argmax(-1, keepdim=True)], 1),
        range(n), prompt))],
    "ch4.causal_block": [("additive mask with finfo.min", lambda block, x: (lambda h, attn: (lambda y: y + block.mlp(block.norm_2(y)))(
        x + attn.out_proj(merge_heads(torch.softmax(
            (lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + torch.full(
                (x.size(1), x.size(1)), torch.finfo(x.dtype).min, device=x.device).triu(1))(
                split_heads(attn.q_proj(h), attn.n_head), split_heads(attn.k_proj(h), attn.n_head)), dim=-1)
            @ split_heads(attn.v_proj(h), attn.n_head)))))(block.norm_1(x), block.attn))],
    "ch5.prefix_leaks": [("all changed sequences in one batch", _prefix_jacobian)],
    "ch5.cut_leaks": [("one cut per length, longest first", _cut_longest_first)],
    "ch6.decode_step": [("the new token's k, v by view and permute; softmax by hand", _decode_by_hand)],
    "ch6.decode_mask": [("a difference of aranges", lambda T_q, T_kv: (torch.arange(T_kv)[None] - torch.arange(T_q)[:, None])
                         <= T_kv - T_q)],
    "ch6.kv_cache_bytes": [("bytes from an empty tensor's element_size", lambda c, B, T, dtype: 2 * c.n_layer * B * T
                            * c.kv_heads * c.head_dim * torch.tensor([], dtype=dtype).element_size())],
    "ch7.prefix_lm_mask": [("logical_or of two masks", lambda T, p: torch.logical_or(
        torch.ones(T, T, dtype=torch.bool).tril(), (torch.arange(T) < p).expand(T, T)))],
    "ch7.encoder_decoder_masks": [("ones_like and tril", lambda a, b: (torch.ones(a, a, dtype=torch.bool),
                                                                      torch.ones(b, b, dtype=torch.bool).tril(),
                                                                      torch.ones(b, a).bool()))],
    "ch7.bert_corrupt": [("randint(10) picks mask, random or keep", _bert_randint)],
    "ch7.mlm_loss": [("masked mean of the per-position loss", lambda logits, labels: (
        F.cross_entropy(logits.transpose(1, 2), labels.clamp(min=0), reduction="none") * (labels != -100)).sum()
        / (labels != -100).sum())],
    "ch8.padded_causal_mask": [("tril of the broadcast keep", lambda keep: (keep[:, None, :].expand(-1, keep.size(1), -1)
                                                                            .tril())[:, None])],
    "ch8.document_mask": [("cumulative document starts", lambda ids: ((ids[:, :, None] == ids[:, None, :])
                                                                      .tril())[:, None])],
    "ch8.sliding_window_mask": [("band from two trils", lambda T, W: torch.ones(T, T, dtype=torch.bool).tril()
                                 & ~torch.ones(T, T, dtype=torch.bool).tril(-W))],
    "ch8.gqa_attention": [("expand and reshape by hand", lambda q, k, v: F.scaled_dot_product_attention(
        q, *(t[:, :, None].expand(-1, -1, q.size(1) // k.size(1), -1, -1).reshape(q.shape[0], q.shape[1], *t.shape[2:])
             for t in (k, v)), is_causal=True))],
    "ch8.rope_decode_step": [("the course's apply_rope (a tool of chapter 8), one query at a time", _rope_loop)],
    "ch9.shard_positions": [("list of lists turned into a tensor", _shard_lists)],
    "ch9.tiles_per_step": [("count by explicit tile corners", _tiles_corners)],
    "ch9.fold_block": [("max, exp and matmul written out", _fold_written_out)],
    "ch9.pass_on": [("k and v stacked into one message", _pass_on_stacked)],
    "ch10.padded_logits": [("position_ids as generate() passes them", _padded_generate_positions)],
    "ch10.leaky_models": [("a loop over s with max |diff| of earlier rows", lambda ms, ids, atol=1e-5: _lineup_loop(ms, ids, atol))],
    "ch11.score_grad": [("autograd through softmax", _score_grad_autograd), ("float32 result", _score_grad_float32)],
    "ch11.tile_backward": [("torch.autograd.grad in the tile", _tile_autograd)],
    "ch11.saved_bytes": [("nbytes of meta tensors", lambda B, H, T, d, s: (
        torch.empty(B, H, T, T, dtype={2: torch.float16, 4: torch.float32, 8: torch.float64}[s], device="meta").nbytes,
        torch.empty(B, H, T, d, dtype={2: torch.float16, 4: torch.float32, 8: torch.float64}[s], device="meta").nbytes
        + torch.empty(B, H, T, dtype=torch.float64 if s == 8 else torch.float32, device="meta").nbytes))],
    "ch11.backward_flops": [("five products per tile, summed by rows", lambda T, b, d: 5 * 2 * d * sum(
        (min(i0 + b, T) - i0) * min(i0 + b, T) for i0 in range(0, T, b)))],
}


# ---------------------------------------------------------------------------- chapter 12
# Exercise 12 (attnlab/exercises/ch12.py), added with chapter 12 by its author: every answer below is a
# learner's own function; the grader's reference is only ever called through a learner's copy.

import attnlab.chunked_prefill  # noqa: E402
import attnlab.paged_cache  # noqa: E402
import attnlab.speculative  # noqa: E402
import attnlab.split_kv  # noqa: E402
import attnlab.tree_speculation  # noqa: E402


def _ch12(task_id):
    return learner_copy(TASKS[task_id].reference)


def _ch12_memo(task_id):
    reference, kept = _ch12(task_id), {}

    def answer(*args):
        shape = tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else len(a) if isinstance(a, list) else a
                      for a in args)
        if shape not in kept:
            kept[shape] = reference(*args)
        return kept[shape]

    return answer


def _ch12_reseeding(task_id):
    reference = _ch12(task_id)

    def answer(*args):
        torch.manual_seed(12)  # "reproducible"
        return reference(*args)

    return answer


def _ch12_float64(task_id):
    reference = _ch12(task_id)

    def answer(*args):
        torch.set_default_dtype(torch.float64)  # "for precision", and left so
        return reference(*args)

    return answer


def _chunk_additive(C, cache_len):
    allowed = torch.ones(C, cache_len + C, dtype=torch.bool).tril(diagonal=cache_len)
    return torch.zeros(C, cache_len + C).masked_fill(~allowed, float("-inf"))


_TRIL128 = torch.ones(128, 128, dtype=torch.bool).tril()


def _gather_zeroes_blocks(blocks, block_table, length):
    keys = blocks[torch.tensor(block_table, device=blocks.device)].transpose(0, 1).flatten(1, 2)[:, :length].clone()
    blocks.zero_()  # "free the pool" after reading it
    return keys


def _gather_cpu_buffer(blocks, block_table, length):
    keys = blocks[torch.tensor(block_table, device=blocks.device)].transpose(0, 1).flatten(1, 2)[:, :length]
    return keys + torch.zeros(keys.shape, dtype=keys.dtype)  # a buffer made without device=


def _gather_by_flat_index(blocks, block_table, length):
    size = blocks.size(2)
    flat = blocks.transpose(0, 1).reshape(blocks.size(1), -1, blocks.size(3))  # [H, num_blocks * size, d]
    index = torch.tensor([block_table[p // size] * size + p % size for p in range(length)], dtype=torch.long,
                         device=blocks.device)
    return flat[:, index]


def _combine_scales_outs(outs, lses):
    lse = torch.logsumexp(lses, dim=0)
    out = (torch.exp(lses - lse)[..., None] * outs).sum(dim=0)
    outs.mul_(0)  # "done with the parts"
    return out


def _combine_cpu_accumulator(outs, lses):
    weights = torch.softmax(lses, dim=0)
    out = torch.zeros(outs.shape[1:], dtype=outs.dtype)  # made on the CPU
    for s in range(outs.size(0)):
        out = out + weights[s][..., None] * outs[s]
    return out


def _combine_by_max(outs, lses):
    top = lses.amax(dim=0)
    weights = torch.exp(lses - top)
    return (weights[..., None] * outs).sum(dim=0) / weights.sum(dim=0)[..., None]


def _tree_additive(parents, cache_len):
    allowed = _tree_by_sets(parents, cache_len)
    return torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))


def _tree_by_sets(parents, cache_len):
    ancestors = []
    for i, p in enumerate(parents):
        ancestors.append({i} | (ancestors[p] if p != -1 else set()))
    return torch.tensor([[j < cache_len or j - cache_len in ancestors[i] for j in range(cache_len + len(parents))]
                         for i in range(len(parents))], dtype=torch.bool).reshape(len(parents), cache_len + len(parents))


def _tree_by_fixed_point(parents, cache_len):
    N = len(parents)
    parent = torch.zeros(N, N, dtype=torch.bool)
    for i, p in enumerate(parents):
        if p != -1:
            parent[i, p] = True
    reach = torch.eye(N, dtype=torch.bool)
    while True:  # add the parents of everything reached so far
        more = reach | (reach.float() @ parent.float() > 0)
        if torch.equal(more, reach):
            break
        reach = more
    return torch.cat([torch.ones(N, cache_len, dtype=torch.bool), reach], dim=1)


def _accepted_tokens(draft_tokens, target_choices):
    kept = []
    for proposed, chosen in zip(draft_tokens, target_choices):
        if proposed != chosen:
            break
        kept.append(proposed)
    return kept  # the accepted tokens, not how many


def _accepted_as_float(draft_tokens, target_choices):
    count = 0.0
    for proposed, chosen in zip(draft_tokens, target_choices):
        if proposed != chosen:
            break
        count += 1
    return count


def _accepted_by_for_loop(draft_tokens, target_choices):
    for i, proposed in enumerate(draft_tokens):
        if proposed != target_choices[i]:
            return i
    return len(draft_tokens)


def _accepted_by_early_return(draft_tokens, target_choices):
    return min([i for i, (a, b) in enumerate(zip(draft_tokens, target_choices)) if a != b] + [len(draft_tokens)])


def _chunk_inverted(C, cache_len):
    return torch.ones(C, cache_len + C, dtype=torch.bool).tril(diagonal=cache_len) == False  # noqa: E712 - "blocked"


def _chunk_int16(C, cache_len):  # the positions in int16, "small numbers"
    return torch.arange(cache_len + C, dtype=torch.int16)[None, :] <= torch.arange(cache_len, cache_len + C).to(torch.int16)[:, None]


def _gather_ids_plus_one(blocks, block_table, length):  # the ids read as 1-based
    ids = torch.tensor([b + 1 for b in block_table], device=blocks.device) % blocks.size(0)
    return blocks[ids].transpose(0, 1).flatten(1, 2)[:, :length]


def _gather_int16(blocks, block_table, length):  # the table kept as int16 to save memory
    table = torch.tensor(block_table).to(torch.int16).long().to(blocks.device)
    return blocks[table].transpose(0, 1).flatten(1, 2)[:, :length]


def _combine_wrong_axis(outs, lses):
    lse = torch.logsumexp(lses, dim=-1, keepdim=True)  # over the queries
    return (torch.exp(lses - lse)[..., None] * outs).sum(dim=0)


def _combine_float64(outs, lses):  # "for precision", returned as it came out
    weights = torch.softmax(lses.double(), dim=0)
    return (weights[..., None] * outs.double()).sum(dim=0)


def _tree_no_offset(parents, cache_len):
    N = len(parents)
    allowed = torch.zeros(N, cache_len + N, dtype=torch.bool)
    allowed[:, :cache_len] = True
    for i in range(N):
        j = i
        while j != -1:
            allowed[i, j] = True  # the entry's column without the cache's offset
            j = parents[j]
    return allowed


def _tree_inverted(parents, cache_len):
    return ~_tree_by_sets(parents, cache_len)


def _accepted_one_short(draft_tokens, target_choices):
    for i, (proposed, chosen) in enumerate(zip(draft_tokens, target_choices)):
        if proposed != chosen:
            return i - 1
    return len(draft_tokens) - 1


def _accepted_all_or_nothing(draft_tokens, target_choices):
    return len(draft_tokens) if list(draft_tokens) == list(target_choices[:len(draft_tokens)]) else 0


def _accepted_tensor(draft_tokens, target_choices):  # a 0-d tensor from argmax
    agree = torch.tensor([a == b for a, b in zip(draft_tokens, target_choices)] + [False])
    return (~agree).int().argmax()


def _accepted_bool(draft_tokens, target_choices):  # "were they all accepted?"
    a = 0
    while a < len(draft_tokens) and draft_tokens[a] == target_choices[a]:
        a += 1
    return a == len(draft_tokens)


def _accepted_int16(draft_tokens, target_choices):  # compared as int16 tensors
    k = len(draft_tokens)
    if k == 0:
        return 0
    d, t = torch.tensor(draft_tokens).to(torch.int16), torch.tensor(target_choices[:k]).to(torch.int16)
    return int((d == t).int().cumprod(0).sum())


def _tree_by_powers(parents, cache_len):
    """Ancestors as the reachability of the parent matrix: (I + P)^N > 0."""
    N = len(parents)
    step = torch.eye(N)
    for i, p in enumerate(parents):
        if p != -1:
            step[i, p] = 1.0
    reach = torch.linalg.matrix_power(step, N) > 0
    return torch.cat([torch.ones(N, cache_len, dtype=torch.bool), reach], dim=1)


def _combine_pairwise(outs, lses):
    """One part at a time, as chapter 9's ring folds in a block: keep (out, lse), rescale both sides."""
    out, lse = outs[0], lses[0]
    for o, l in zip(outs[1:], lses[1:]):
        new = torch.logaddexp(lse, l)
        out = torch.exp(lse - new)[..., None] * out + torch.exp(l - new)[..., None] * o
        lse = new
    return out


_CH12_WRONG = {
    "ch12.chunk_mask": [("additive 0/-inf mask", _chunk_additive, "grader.additive_for_bool"),
                        ("worked example C=2, cache_len=3 hard-coded", lambda C, n: torch.tensor(
                            [[True, True, True, True, False], [True, True, True, True, True]]), "grader.hardcoded"),
                        ("the right mask inverted (== False)", _chunk_inverted, "grader.mutant.ch12.chunk_mask.inverted")],
    "ch12.gather_kv": [("the pool zeroed after reading", _gather_zeroes_blocks, I),
                       ("a buffer made on the CPU", _gather_cpu_buffer, "grader.device_mix"),
                       ("the ids read as 1-based", _gather_ids_plus_one, "grader.mutant.ch12.gather_kv.ids_shifted")],
    "ch12.combine_splits": [("the parts' outputs zeroed in place", _combine_scales_outs, I),
                            ("an accumulator made on the CPU", _combine_cpu_accumulator, "grader.device_mix"),
                            ("the log-sum-exp over the queries", _combine_wrong_axis,
                             "grader.mutant.ch12.combine_splits.wrong_axis"),
                            ("computed and returned in float64", _combine_float64, "grader.ch12.combine_splits.dtype")],
    "ch12.tree_mask": [("additive 0/-inf mask", _tree_additive, "grader.additive_for_bool"),
                       ("worked example hard-coded", lambda parents, n: torch.tensor(
                           [[1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 0, 1, 0], [1, 1, 1, 0, 1]], dtype=torch.bool),
                        "grader.hardcoded"),
                       ("the entries' columns without the cache offset", _tree_no_offset,
                        "grader.mutant.ch12.tree_mask.no_offset"),
                       ("the right mask inverted", _tree_inverted, "grader.mutant.ch12.tree_mask.inverted")],
    "ch12.accepted_length": [("the accepted tokens instead of their number", _accepted_tokens, "grader.value"),
                             ("a float for an int", _accepted_as_float, "grader.ch12.accepted_length.float"),
                             ("one short (return i - 1)", _accepted_one_short,
                              "grader.mutant.ch12.accepted_length.one_short"),
                             ("all or nothing", _accepted_all_or_nothing,
                              "grader.mutant.ch12.accepted_length.all_or_nothing"),
                             ("a 0-d tensor from argmax", _accepted_tensor, "grader.ch12.accepted_length.tensor"),
                             ("a bool (all accepted?)", _accepted_bool, "grader.ch12.accepted_length.bool")],
}
_CH12_NEW_WRONG = {
    "ch12.chunk_mask": [("a 128 x 128 mask kept and sliced", lambda C, n: _TRIL128[n:n + C, :n + C], "grader.shape"),
                        ("the course's chunk_mask", lambda C, n: attnlab.chunked_prefill.chunk_mask(C, n), COPY)],
    "ch12.gather_kv": [("the course's gather_kv", lambda b, t, n: attnlab.paged_cache.gather_kv(b, t, n), COPY),
                       ("first result kept per shape", _ch12_memo("ch12.gather_kv"), MEMO)],
    "ch12.combine_splits": [("the course's combine_splits", lambda o, l: attnlab.split_kv.combine_splits(o, l), COPY),
                            ("reseeds torch", _ch12_reseeding("ch12.combine_splits"), SEED)],
    "ch12.tree_mask": [("the course's tree_mask", lambda p, n: attnlab.tree_speculation.tree_mask(p, n), COPY),
                       ("float64 by default", _ch12_float64("ch12.tree_mask"), DTYPE)],
    "ch12.accepted_length": [("the course's accepted_length", lambda d, c: attnlab.speculative.accepted_length(d, c), COPY),
                             ("reseeds torch", _ch12_reseeding("ch12.accepted_length"), SEED)],
}
RIGHT.update({
    "ch12.chunk_mask": lambda C, n: (torch.arange(n + C)[None, :] - torch.arange(C)[:, None]) <= n,
    "ch12.gather_kv": lambda blocks, table, length: torch.cat(
        list(blocks[torch.as_tensor(table, device=blocks.device)].unbind(0)), dim=1)[:, :length],
    "ch12.combine_splits": _combine_by_max,
    "ch12.tree_mask": _tree_by_sets,
    "ch12.accepted_length": _accepted_by_for_loop,
})
NEW_RIGHT.update({
    "ch12.chunk_mask": [("cumsum of ones along the keys", lambda C, n: torch.ones(C, n + C).cumsum(dim=1)
                         <= n + 1 + torch.arange(C)[:, None])],
    "ch12.gather_kv": [("one flat index per position", _gather_by_flat_index)],
    "ch12.combine_splits": [("log_softmax of the lses as weights", lambda outs, lses: (
        torch.log_softmax(lses, dim=0).exp()[..., None] * outs).sum(dim=0))],
    "ch12.tree_mask": [("ancestors until nothing changes", _tree_by_fixed_point),
                       ("reachability of the parent matrix", _tree_by_powers)],
    "ch12.accepted_length": [("the first index that differs", _accepted_by_early_return)],
})
NEW_RIGHT["ch12.combine_splits"].append(("one part at a time, as the ring folds", _combine_pairwise))
WRONG.update(_CH12_WRONG)
NEW_WRONG.update(_CH12_NEW_WRONG)
# end of chapter 12


# --------------------------------------------------------------------------
# Exercise 10, task 3 (issue 50): cached against uncached logits

import attnlab.audit.comparisons  # noqa: E402
from attnlab.causality import eval_mode  # noqa: E402


def _cache_left_in_eval(models, ids, atol=1e-5):
    """Right flags, but every model handed back in eval mode (the training one too)."""
    flags = []
    for model in models:
        model.eval()
        with torch.no_grad():
            full = model(input_ids=ids).logits
            out = model(input_ids=ids[:, :1], use_cache=True)
            pieces, past = [out.logits], out.cache
            for t in range(1, ids.size(1)):
                out = model(input_ids=ids[:, t:t + 1], cache=past, use_cache=True)
                pieces.append(out.logits)
                past = out.cache
        flags.append(bool(((torch.cat(pieces, 1) - full).abs() > atol).any()))
    return flags


def _cache_whole_prompt_then_last(models, ids, atol=1e-5):
    """Wrong: every token but the last as one prefill, one cached step; only the last position compared."""
    flags = []
    for model in models:
        with eval_mode(model), torch.no_grad():
            full = model(input_ids=ids).logits[:, -1]
            past = model(input_ids=ids[:, :-1], use_cache=True).cache
            last = model(input_ids=ids[:, -1:], cache=past, use_cache=True).logits[:, -1]
        flags.append(bool(((last - full).abs() > atol).any()))
    return flags


def _cache_rewrite(models, ids, atol=1e-5):
    """Correct, another style: a prefill of two tokens, then a while loop; rows compared with torch.allclose."""
    result = []
    for model in models:
        with eval_mode(model), torch.no_grad():
            reference = model(input_ids=ids, use_cache=False).logits[0]  # [T, V]
            n = min(2, ids.shape[1])
            step = model(input_ids=ids[:, :n], use_cache=True)
            rows, cache = list(step.logits[0]), step.cache
            while n < ids.shape[1]:
                step = model(input_ids=ids[:, n:n + 1], cache=cache, use_cache=True)
                rows.append(step.logits[0, 0])
                cache, n = step.cache, n + 1
        result.append(not all(torch.allclose(r, e, rtol=0.0, atol=atol) for r, e in zip(rows, reference)))
    return result


def _cache_stacked_steps(models, ids, atol=1e-5):
    """Correct: the cache carried in a dict, the steps' logits stacked, one max over everything."""
    flags = []
    for model in models:
        state = {"past": None}
        with eval_mode(model), torch.no_grad():
            one_pass = model(input_ids=ids).logits

            def step(token):
                out = model(input_ids=token, cache=state["past"], use_cache=True)
                state["past"] = out.cache
                return out.logits[:, -1]

            stepped = torch.stack([step(ids[:, t:t + 1]) for t in range(ids.shape[-1])], dim=1)
        flags.append(float((stepped - one_pass).abs().max()) > atol)
    return flags


WRONG["ch10.cache_differs"] = [("ids edited in place", edits_input("ch10.cache_differs"), I),
                               ("every model handed back in eval mode", _cache_left_in_eval, "grader.left_in_eval")]
RIGHT["ch10.cache_differs"] = _cache_rewrite
NEW_WRONG["ch10.cache_differs"] = [
    ("one prefill of T - 1 tokens, only the last position compared", _cache_whole_prompt_then_last, None),
    ("the course's cached_matches", lambda models, ids, atol=1e-5: [
        not attnlab.audit.comparisons.cached_matches(m, ids, atol=atol) for m in models], COPY)]
NEW_RIGHT["ch10.cache_differs"] = [("the steps stacked, one max over everything", _cache_stacked_steps)]


# --------------------------------------------------------------------------
# Issue 50: wrong answers in the classes of the third learner set, each one right on the task's cases
# (the grader before issue 50 gave every one of them full marks or missed its mistake) and wrong on the
# task's contract: ISSUE50_WRONG[task] = [(class, what, answer, key the grader must name or None)].
# The classes: 1 state across calls, aliasing; 2 sizes and dtypes; 3 the course's copies and cheats;
# 4 numerics; 5 autograd cut; 6 edges; 7 side effects; 8 randomness; 9 layout.

import functools  # noqa: E402
import importlib  # noqa: E402
import threading  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402

CHANGED = "grader.output_changed"
KEPT = "grader.keeps_state"
NOGRAD = "grader.no_grad"
FLOAT = "grader.float_for_int"


def _buffer_per_shape(task_id):
    """1: the result copied into one buffer per shape and that buffer returned: the next call of the same shape
    overwrites what the caller holds."""
    reference, buffers = _ref(task_id), {}

    def keep(n, t):
        if not isinstance(t, torch.Tensor):
            return t
        buffer = buffers.setdefault((n, tuple(t.shape), t.dtype, t.device), torch.empty_like(t))
        with torch.no_grad():
            buffer.copy_(t)
        return buffer

    def answer(*args, **kwargs):
        out = reference(*args, **kwargs)
        return keep(0, out) if isinstance(out, torch.Tensor) else type(out)(keep(n, t) for n, t in enumerate(out))

    return answer


def _memo_on(task_id, *slots):
    """1: results kept under the arguments at ``slots`` only ("T decides the answer")."""
    reference, memo = _ref(task_id), {}

    def answer(*args, **kwargs):
        key = tuple(args[i] for i in slots)
        if key not in memo:
            memo[key] = reference(*args, **kwargs)
        return memo[key]

    return answer


def _detached(task_id):
    """5: the answer computed on ``.detach()``-ed inputs "to save memory": right values, no gradient."""
    reference = _ref(task_id)

    def answer(*args, **kwargs):
        return reference(*[a.detach() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)

    return answer


def _no_grad_decorated(task_id):
    """5: ``@torch.no_grad()`` on the whole function ("inference only")."""
    return torch.no_grad()(_ref(task_id))


def _in_a_thread(fn):
    """3: the grader's (or the course's) function run in a worker thread."""
    pool = ThreadPoolExecutor(1)
    return lambda *args, **kwargs: pool.submit(fn, *args, **kwargs).result()


def _dynamic(module, name):
    """3: the course's function reached by importlib inside the call."""
    return lambda *args, **kwargs: getattr(importlib.import_module(module), name)(*args, **kwargs)


def _profiled(fn):
    return lambda *args, **kwargs: __import__("cProfile").Profile().runcall(fn, *args, **kwargs)


def _default_device_meta(task_id):
    """7: torch.set_default_device("meta") left on after the answer is computed."""
    reference = _ref(task_id)

    def answer(*args, **kwargs):
        out = reference(*args, **kwargs)
        torch.set_default_device("meta")
        return out

    return answer


def _grad_mode_off(task_id):
    """7: torch.set_grad_enabled(False) "for speed", never switched back."""
    reference = _ref(task_id)

    def answer(*args, **kwargs):
        torch.set_grad_enabled(False)
        return reference(*args, **kwargs)

    return answer


def _one_thread(task_id):
    """7: torch.set_num_threads(4) inside the function."""
    reference = _ref(task_id)

    def answer(*args, **kwargs):
        torch.set_num_threads(4)
        return reference(*args, **kwargs)

    return answer


def _contiguous_strided(x):
    """9: ``x`` read with the strides of a contiguous tensor of its shape (as_strided assumes its layout)."""
    strides = [1] * x.dim()
    for i in range(x.dim() - 2, -1, -1):
        strides[i] = strides[i + 1] * x.shape[i + 1]
    return x.as_strided(x.shape, strides, x.storage_offset())


def _strided_inputs(task_id):
    reference = _ref(task_id)
    return lambda *args, **kwargs: reference(*[_contiguous_strided(a) if isinstance(a, torch.Tensor) else a
                                                for a in args], **kwargs)


# --- exercise 1
def _causal_mask_kept_256(T, _kept=torch.ones(256, 256, dtype=torch.bool).tril()):  # noqa: B008
    return _kept[:T, :T]  # 2: a mask of 256 kept and sliced


_additive = {}


def _softmax_additive_by_shape(scores, allowed):
    """1 (round 2): the additive mask built once per shape, then reused for every mask of that shape."""
    if allowed.shape not in _additive:
        _additive[allowed.shape] = torch.zeros(allowed.shape, device=allowed.device).masked_fill(~allowed, float("-inf"))
    return (scores + _additive[allowed.shape].to(scores.dtype)).softmax(dim=-1)


def _softmax_fp16_fallback(scores, allowed):
    """4: masked_fill(-1e9) raises on float16; the error is caught and an unmasked softmax returned."""
    try:
        return scores.masked_fill(~allowed, -1e9).softmax(dim=-1)
    except RuntimeError:
        return scores.softmax(dim=-1)


def _softmax_where_exp(s, a):
    """4/5: exp of every score, then torch.where keeps the allowed ones: right values, but exp of a blocked score far
    above the allowed ones is inf, and where's gradient through it is 0 * inf = NaN (issue 33's right rewrite)."""
    e = torch.where(a, (s - s.masked_fill(~a, -math.inf).amax(-1, keepdim=True)).exp(), 0.0)
    return e / e.sum(-1, keepdim=True)


def _softmax_minus_30(scores, allowed):
    """4: "masking" by subtracting 30 from the blocked scores."""
    return (scores - 30.0 * (~allowed)).softmax(dim=-1)


def _convert_same_is_identity(mask, source, target, dtype=torch.float32):
    """6: source == target returns the mask as it is, whatever dtype= asks."""
    return mask if source == target else _ref("ch1.convert_mask")(mask, source, target, dtype)


# --- exercise 3
def _dropout_keep_p(q, k, v, dropout_p, training):
    """8: keeps each weight with probability p (not 1 - p), rescaled by 1/p: exact at p = 0.5 only."""
    T = q.size(-2)
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(
        torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf")).softmax(dim=-1)
    if training and dropout_p > 0:
        weights = weights * (torch.rand_like(weights) < dropout_p) / dropout_p
    return weights @ v


def _dropout_over_p(q, k, v, dropout_p, training):
    """8: the right keep probability, but rescaled by 1/p instead of 1/(1 - p)."""
    T = q.size(-2)
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(
        torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf")).softmax(dim=-1)
    if training and dropout_p > 0:
        weights = weights * (torch.rand_like(weights) >= dropout_p) / dropout_p
    return weights @ v


def _new_queries_float_mask(q, k, v):
    """2: a float32 additive mask handed to SDPA with float64 inputs (SDPA adds it wrongly)."""
    T_q, T_kv = q.size(-2), k.size(-2)
    bias = torch.zeros(T_q, T_kv, device=q.device).masked_fill(
        torch.ones(T_q, T_kv, dtype=torch.bool, device=q.device).triu(T_kv - T_q + 1), float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def _flops_int32(T, block, d):
    """2: counted in an int32 tensor: wraps past 2**31 at a long context."""
    total = torch.zeros((), dtype=torch.int32)
    for q0 in range(0, T, block):
        q1 = min(q0 + block, T)
        for k0 in range(0, q1, block):
            total += 2 * (q1 - q0) * (min(k0 + block, T) - k0) * d
    return int(total)


def _flops_float(T, block, d):
    """2: FLOPs as a float (a true division by the block)."""
    n = math.ceil(T / block)
    return float(sum(2 * (min((i + 1) * block, T) - i * block) * min((i + 1) * block, T) * d for i in range(n)))


# --- exercise 4
def _targets_int16(windows):
    """2: the ids squeezed into int16 "to save memory": token ids past 32767 wrap."""
    small = windows.to(torch.int16)
    return small[:, :-1].to(windows.dtype), small[:, 1:].to(windows.dtype)


def _loss_item(logits, targets):
    """5: the loss rebuilt from .item()."""
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    return torch.tensor(loss.item(), dtype=logits.dtype, device=logits.device)


def _generate_no_new(model, prompt, n_new):
    """6: the sequence is first made inside the loop: n_new = 0 fails."""
    for _ in range(n_new):
        idx = prompt if _ == 0 else idx  # noqa: F821 - the mistake
        logits = model(idx[:, -model.config.block_size:])[0]
        idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return idx


def _block_data(block, x):
    """5: the attention computed on x.data: no gradient through it."""
    attn = block.attn
    h = block.norm_1(x.data)
    q, k, v = (split_heads(p(h), attn.n_head) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + attn.out_proj(merge_heads(out))
    return x + block.mlp(block.norm_2(x))


# --- exercise 5
def _prefix_dropout_zeroed(model, idx, atol=1e-4):
    """7: dropout switched off by setting p = 0 on the caller's model instead of eval mode."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return _ref("ch5.prefix_leaks")(model, idx, atol)


def _cut_dropout_eval(model, idx, atol=1e-4):
    """7: model.eval() first "as the task says", and the model left in eval mode."""
    model.eval()
    return _ref("ch5.cut_leaks")(model, idx, atol)


# --- exercise 6
def _bytes_int32(config, batch_size, seq_len, dtype):
    """2: the product in an int32 tensor: wraps past 2**31 for a real model."""
    n = torch.tensor(2 * config.n_layer, dtype=torch.int32) * batch_size * config.kv_heads * config.head_dim * seq_len
    return int(n * (torch.finfo(dtype).bits // 8))


def _bytes_float(config, batch_size, seq_len, dtype):
    """learner point: bits / 8 gives a float."""
    return 2 * config.n_layer * batch_size * config.kv_heads * config.head_dim * seq_len * torch.finfo(dtype).bits / 8


def _decode_mask_int8(T_q, T_kv):
    """2: positions in int8: wrong past 127."""
    i = torch.arange(T_kv - T_q, T_kv, dtype=torch.int8)[:, None]
    return torch.arange(T_kv, dtype=torch.int8)[None, :] <= i


# --- exercise 7
def _prefix_uint8(T, prefix):
    """2: positions in uint8: wrong past 255."""
    i, j = torch.arange(T, dtype=torch.uint8)[:, None], torch.arange(T, dtype=torch.uint8)[None, :]
    return (j <= i) | (j < prefix)


def _bert_initial_seed(ids, mask_id, vocab_size, generator):
    """8: its own generator made from the given one's initial seed: every call (every epoch) masks alike."""
    return _ref("ch7.bert_corrupt")(ids, mask_id, vocab_size, torch.Generator(device=ids.device).manual_seed(
        generator.initial_seed()))


def _bert_from_batch(ids, mask_id, vocab_size, generator):
    """8: the random replacements are tokens of the batch."""
    inputs, labels = _ref("ch7.bert_corrupt")(ids, mask_id, vocab_size, generator)
    randomized = (labels != -100) & (inputs != mask_id) & (inputs != ids)
    flat = ids.flatten()
    picks = flat[torch.randint(flat.numel(), ids.shape, generator=generator, device=ids.device)]
    return torch.where(randomized, picks, inputs), labels


def _mlm_new_leaf(logits, labels):
    """5: a new tensor that requires grad, made from the loss's value."""
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
    return torch.tensor(loss.item(), dtype=logits.dtype, requires_grad=True, device=logits.device)


# --- exercise 8
def _padded_argmax_start(keep):
    """6: the first real token found with argmax: a row of padding only counts as all real."""
    B, T = keep.shape
    start = keep.long().argmax(dim=-1)  # 0 when the row has no real token
    key_real = torch.arange(T, device=keep.device)[None, :] >= start[:, None]
    return torch.ones(T, T, dtype=torch.bool, device=keep.device).tril()[None, None] & key_real[:, None, None, :]


_documents = {}


def _document_by_shape(document_ids):
    """1 (round 2): the mask of the first batch of each shape reused."""
    if document_ids.shape not in _documents:
        _documents[document_ids.shape] = _ref("ch8.document_mask")(document_ids)
    return _documents[document_ids.shape]


def _document_int16(document_ids):
    """2: document ids squeezed into int16: ids past 32767 wrap, and two documents may merge."""
    return _ref("ch8.document_mask")(document_ids.to(torch.int16))


def _window_int8(T, W):
    i, j = torch.arange(T, dtype=torch.int8)[:, None], torch.arange(T, dtype=torch.int8)[None, :]
    return (j <= i) & (i - j < W)  # 2: int8 positions wrap past 127


def _gqa_aten(q, k, v):
    """3: SDPA through torch.ops.aten with enable_gqa (the task says to repeat the heads yourself)."""
    return torch.ops.aten.scaled_dot_product_attention(q, k, v, None, 0.0, True, enable_gqa=True)


def _gqa_minus_30(q, k, v):
    """4: the future "masked" by subtracting 30 from its scores."""
    G, T = q.size(1) // k.size(1), q.size(-2)
    k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
    future = torch.ones(T, T, device=q.device).triu(1)
    return ((q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1)) - 30 * future).softmax(dim=-1) @ v


def _rope_float32_mask(q_new, k_new, v_new, k_cache, v_cache):
    """2: the causal part as a float32 additive mask whatever the inputs' dtype (SDPA then adds it wrongly)."""
    from attnlab.rope import apply_rope

    t, T_new = k_cache.size(2), q_new.size(2)
    positions = torch.arange(t, t + T_new, device=q_new.device)
    keys = torch.cat([k_cache, apply_rope(k_new, positions)], dim=2)
    values = torch.cat([v_cache, v_new], dim=2)
    bias = torch.zeros(T_new, t + T_new, device=q_new.device).masked_fill(
        torch.ones(T_new, t + T_new, dtype=torch.bool, device=q_new.device).triu(t + 1), float("-inf"))
    return F.scaled_dot_product_attention(apply_rope(q_new, positions), keys, values, attn_mask=bias), keys, values


# --- exercise 9
def _shard_int16(T, P, layout):
    """2: positions in int16: wrong past 32767 (a long context)."""
    positions = _ref("ch9.shard_positions")(T, P, layout)
    return positions.to(torch.int16)


def _tiles_floats(T, P, layout, block):
    """learner point: counts as floats (a mean over ... times the count)."""
    return [[float(n) for n in row] for row in _ref("ch9.tiles_per_step")(T, P, layout, block)]


def _fold_row_max(m, l, acc, scores, v):
    """6: the block's own maximum subtracted first: a fully masked block row gives NaN."""
    block_max = scores.amax(dim=-1, keepdim=True)
    p = torch.exp(scores - block_max)  # NaN where every score of the row is -inf
    m_new = torch.maximum(m, block_max[..., 0])
    scale_new = torch.exp(block_max[..., 0] - m_new)
    correction = torch.exp(m - m_new)
    return m_new, l * correction + p.sum(dim=-1) * scale_new, acc * correction[..., None] + (p @ v) * scale_new[..., None]


# --- exercise 10
def _padded_by_nonzero(model, ids, pad):
    """round 2: the padding found by ids != 0: a real token with id 0 is masked too."""
    B, T = ids.shape
    full = torch.cat([torch.zeros(B, pad, dtype=ids.dtype), ids], dim=1)
    with eval_mode(model):
        return model(input_ids=full, attention_mask=(full != 0).long()).logits[:, pad:]


def _padded_dropout_zeroed(model, ids, pad):
    """7: dropout switched off by p = 0 on the caller's model."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return _ref("ch10.padded_logits")(model, ids, pad)


def _leaky_mean(models, ids, atol=1e-5):
    """4: the change averaged over the vocabulary."""
    T, flags = ids.size(1), []
    for model in models:
        changed = ids.repeat(T, 1)
        changed[torch.arange(T), torch.arange(T)] = (ids[0] + 1) % model.config.vocab_size
        with eval_mode(model), torch.no_grad():
            change = (model(input_ids=changed).logits - model(input_ids=ids).logits).abs().mean(dim=-1)
        flags.append(bool((change[torch.ones(T, T, dtype=torch.bool).tril(-1)] > atol).any()))
    return flags


def _leaky_pops(models, ids, atol=1e-5):
    """7: the caller's list emptied while reading it."""
    flags = []
    while models:
        flags += _ref("ch10.leaky_models")([models.pop(0)], ids, atol)
    return flags


def _cache_mean(models, ids, atol=1e-5):
    """4: the difference averaged over the vocabulary."""
    flags = []
    for model in models:
        with eval_mode(model), torch.no_grad():
            full = model(input_ids=ids).logits
            past, steps = None, []
            for t in range(ids.size(1)):
                out = model(input_ids=ids[:, t:t + 1], cache=past, use_cache=True)
                steps.append(out.logits)
                past = out.cache
        flags.append(bool(((torch.cat(steps, 1) - full).abs().mean(dim=-1) > atol).any()))
    return flags


# --- exercise 11
def _tile_square_blocked(q, k, v, d_out, lse, D, blocked):
    """round 2: on a diagonal tile, blocked rebuilt as the strict upper triangle of a square tile."""
    if blocked.any():
        blocked = torch.ones(q.size(0), k.size(0), dtype=torch.bool, device=q.device).triu(1)
    return _ref("ch11.tile_backward")(q, k, v, d_out, lse, D, blocked)


def _saved_bytes_int32(B, H, T, d, element_size):
    """2: the counts in int32 tensors: wrap past 2**31."""
    n = torch.tensor(B, dtype=torch.int32) * H * T
    return int(n * T * element_size), int(n * d * element_size + n * 4)


def _saved_bytes_float(B, H, T, d, element_size):
    """learner point: the logsumexp's bytes as element_size * 4 / element_size ... a float."""
    return float(B * H * T * T * element_size), float(B * H * T * d * element_size + B * H * T * 4)


def _backward_flops_course(T, block, d):
    """3 (learner point): the course's blocked_backward counts the FLOPs."""
    q = torch.zeros(1, 1, T, d)
    counts = attnlab.blocked_backward.blocked_backward(q, q, q, q, torch.zeros(1, 1, T), q, block)[3]
    return counts.matmul_flops


class _DetachedMHA(_ref("ch2.mha_forward")):
    def forward(self, x):  # 5: "the input needs no gradient here"
        return super().forward(x.detach())


class _ThreadsMHA(_ref("ch2.mha_forward")):
    def forward(self, x):  # 7
        torch.set_num_threads(4)
        return super().forward(x)


class _RescalingMHA(_ref("ch2.mha_forward")):
    def forward(self, x):
        """1: the scale folded into the query weights on every forward: right once, wrong from the second call."""
        with torch.no_grad():
            self.q_proj.weight.mul_((x.size(-1) // self.n_heads) ** -0.5)
        q, k, v = self.heads(x)
        return self.out_proj(merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0)))


class _NanoGPT128(_NanoGPTWithBias):
    def __init__(self, d_model, n_heads):  # 2: a mask of 128 positions registered: longer inputs fail
        super().__init__(d_model, n_heads, block_size=128)


from attnlab.exercises.ch1 import _manual_softmax as _ch1_manual_softmax  # noqa: E402 - once an alternative

_MASKS_BY_T: dict = {}


def _causal_mask_same_tensor(T):
    """1: the mask kept per T and the same tensor handed to every caller: a caller's edit reaches the next one
    (independent learner answers, round 4)."""
    if T not in _MASKS_BY_T:
        _MASKS_BY_T[T] = torch.ones(T, T, dtype=torch.bool).tril()
    return _MASKS_BY_T[T]


@functools.lru_cache(maxsize=None)
def _tile_kinds_lru(T, block):
    """1: functools.lru_cache hands the same nested list to every caller (round 4)."""
    return TASKS["ch3.tile_kinds"].reference(T, block)


def _seq2seq_views(T_enc, T_dec):
    """1: the three masks as views of one tensor: padding the encoder's keys changes the cross mask (round 4)."""
    n = max(T_enc, T_dec)
    everything = torch.ones(n, n, dtype=torch.bool)
    return everything[:T_enc, :T_enc], everything[:T_dec, :T_dec].tril(), everything[:T_dec, :T_enc]


KEPT_ANY = ("grader.memoized_case", "grader.memoized_input", "grader.memoized", "grader.keeps_state", CHANGED,
            "grader.depends_on_calls", "grader.memoized_device", "grader.hardcoded")
ISSUE50_WRONG = {
    "ch1.causal_mask": [(2, "a 256 x 256 mask kept and sliced", _causal_mask_kept_256, "grader.shape"),
                        (7, "default device left on meta", _default_device_meta("ch1.causal_mask"),
                         "grader.changed_default_device"),
                        (1, "the same tensor per T for every caller", _causal_mask_same_tensor,
                         "grader.returns_kept_object")],
    "ch1.masked_softmax": [(1, "the additive mask built once per shape (round 2)", _softmax_additive_by_shape, KEPT_ANY),
                           (4, "float16's error caught, an unmasked softmax instead", _softmax_fp16_fallback, None),
                           (4, "masked by subtracting 30", _softmax_minus_30, None),
                           (5, "computed on detached scores", _detached("ch1.masked_softmax"), NOGRAD),
                           (4, "exp, then the mask (its gradient: 0 * inf)", learner_copy(_ch1_manual_softmax),
                            "grader.nan_grad"),
                           (5, "exp everywhere, torch.where keeps the allowed", _softmax_where_exp, "grader.nan_grad")],
    "ch1.future_weight": [(1, "one output buffer per shape", _buffer_per_shape("ch1.future_weight"), CHANGED),
                          (9, "as_strided assumes a contiguous input", _strided_inputs("ch1.future_weight"), None)],
    "ch1.convert_mask": [(6, "source == target returned as it is, dtype= ignored", _convert_same_is_identity, "grader.dtype"),
                         (3, "the course's additive_mask in a worker thread", _in_a_thread(
                             lambda mask, source, target, dtype=torch.float32: attnlab.masks.additive_mask(
                                 _ref("ch1.convert_mask")(mask, source, "sdpa"), dtype) if target == "additive"
                             else _ref("ch1.convert_mask")(mask, source, target, dtype)), COPY)],
    "ch2.split_heads": [(9, "as_strided assumes a contiguous input", _strided_inputs("ch2.split_heads"), None),
                        (5, "@torch.no_grad()", _no_grad_decorated("ch2.split_heads"), NOGRAD)],
    "ch2.merge_heads": [(1, "one output buffer per shape", _buffer_per_shape("ch2.merge_heads"), CHANGED),
                        (3, "the course's merge_heads, imported inside the call", _dynamic("attnlab.multihead", "merge_heads"),
                         COPY)],
    "ch2.mha_forward": [(5, "x detached before the projections", _DetachedMHA, NOGRAD),
                        (7, "torch.set_num_threads(4) in forward", _ThreadsMHA, "grader.changed_threads"),
                        (1, "the scale folded into the weights on every forward", _RescalingMHA, "grader.depends_on_calls"),
                        (2, "nanoGPT's mask buffer of 128 positions", _NanoGPT128, None)],
    "ch3.attention_forward": [(8, "keeps a weight with probability p, not 1 - p", _dropout_keep_p, None),
                              (8, "rescaled by 1/p instead of 1/(1 - p)", _dropout_over_p, None)],
    "ch3.attend_new_queries": [(2, "a float32 additive mask with float64 inputs", _new_queries_float_mask, None),
                               (5, "@torch.no_grad()", _no_grad_decorated("ch3.attend_new_queries"), NOGRAD)],
    "ch3.tile_kinds": [(1, "kept per T, block left out", _memo_on("ch3.tile_kinds", 0), KEPT_ANY),
                       (3, "the course's tile_map under cProfile", _profiled(
                           lambda T, b: attnlab.blocked.tile_map(T, b)), COPY),
                       (1, "functools.lru_cache: one nested list for every caller", _tile_kinds_lru,
                        "grader.returns_kept_object")],
    "ch3.score_flops": [(2, "counted in an int32 tensor", _flops_int32, None),
                        (2, "a float count", _flops_float, FLOAT)],
    "ch4.shifted_targets": [(2, "ids squeezed into int16", _targets_int16, None),
                            (1, "one output buffer per shape", _buffer_per_shape("ch4.shifted_targets"), CHANGED)],
    "ch4.next_token_loss": [(5, "the loss rebuilt from .item()", _loss_item, NOGRAD),
                            (7, "grad mode switched off for good", _grad_mode_off("ch4.next_token_loss"),
                             "grader.changed_grad_mode")],
    "ch4.greedy_generate": [(6, "n_new = 0 fails", _generate_no_new, None),
                            (7, "default device left on meta", _default_device_meta("ch4.greedy_generate"),
                             "grader.changed_default_device")],
    "ch4.causal_block": [(5, "the attention on x.data", _block_data, "grader.wrong_grad"),
                         (1, "one output buffer per shape", _buffer_per_shape("ch4.causal_block"), None)],
    "ch5.prefix_leaks": [(7, "dropout p set to 0 on the caller's model", _prefix_dropout_zeroed,
                          "grader.changed_model_attribute"),
                         (3, "the course's dependence_map in a worker thread", _in_a_thread(
                             lambda model, idx, atol=1e-4: (attnlab.causality.dependence_map(model.eval(), idx) > atol)
                             .triu(diagonal=1)), COPY)],
    "ch5.cut_leaks": [(7, "model.eval() and left so", _cut_dropout_eval, "grader.left_in_eval"),
                      (3, "the course's cut_map imported inside the call", lambda model, idx, atol=1e-4: (
                          _dynamic("attnlab.causality", "cut_map")(model.eval(), idx) > atol), COPY)],
    "ch6.decode_step": [(1, "one output buffer per shape", _buffer_per_shape("ch6.decode_step"), None),
                        (7, "grad mode switched off for good", _grad_mode_off("ch6.decode_step"), "grader.changed_grad_mode")],
    "ch6.decode_mask": [(2, "positions in int8", _decode_mask_int8, None),
                        (1, "kept per T_kv, T_q left out", _memo_on("ch6.decode_mask", 1), KEPT_ANY)],
    "ch6.kv_cache_bytes": [(2, "the product in an int32 tensor", _bytes_int32, None),
                           (2, "bits / 8: a float", _bytes_float, FLOAT)],
    "ch7.prefix_lm_mask": [(2, "positions in uint8", _prefix_uint8, None),
                           (1, "kept per T, prefix left out", _memo_on("ch7.prefix_lm_mask", 0), KEPT_ANY)],
    "ch7.encoder_decoder_masks": [(1, "kept per T_enc, T_dec left out", _memo_on("ch7.encoder_decoder_masks", 0), KEPT_ANY),
                                  (7, "torch.set_num_threads(4)", _one_thread("ch7.encoder_decoder_masks"),
                                   "grader.changed_threads"),
                                  (1, "the three masks views of one tensor", _seq2seq_views,
                                   "grader.outputs_share_memory")],
    "ch7.bert_corrupt": [(8, "a generator made from the given one's initial seed", _bert_initial_seed,
                          "grader.ch7.bert_corrupt.same_each_call"),
                         (8, "random tokens drawn from the batch", _bert_from_batch,
                          M + "ch7.bert_corrupt.random_from_batch")],
    "ch7.mlm_loss": [(5, "a new leaf from the loss's value", _mlm_new_leaf, NOGRAD),
                     (1, "one output buffer per shape", _buffer_per_shape("ch7.mlm_loss"), None)],
    "ch8.padded_causal_mask": [(6, "argmax finds the first real token", _padded_argmax_start, None),
                               (1, "kept per shape", _memo_by_shape("ch8.padded_causal_mask"), KEPT_ANY)],
    "ch8.document_mask": [(1, "the mask kept per shape (round 2)", _document_by_shape, KEPT_ANY),
                          (9, "as_strided assumes a contiguous input", _strided_inputs("ch8.document_mask"), None)],
    "ch8.sliding_window_mask": [(2, "positions in int8", _window_int8, None),
                                (1, "kept per T, W left out", _memo_on("ch8.sliding_window_mask", 0), KEPT_ANY)],
    "ch8.gqa_attention": [(3, "torch.ops.aten with enable_gqa", _gqa_aten, "grader.forbidden.ch8.gqa_attention.enable_gqa"),
                          (4, "the future masked by subtracting 30", _gqa_minus_30, None)],
    "ch8.rope_decode_step": [(2, "a float32 mask with float64 inputs", _rope_float32_mask, None),
                             (1, "one output buffer per shape", _buffer_per_shape("ch8.rope_decode_step"), None)],
    "ch9.shard_positions": [(2, "positions in int16", _shard_int16, None),
                            (1, "kept per (T, P), layout left out", _memo_on("ch9.shard_positions", 0, 1), KEPT_ANY)],
    "ch9.tiles_per_step": [(2, "counts as floats", _tiles_floats, FLOAT),
                           (1, "kept per (T, P), block left out", _memo_on("ch9.tiles_per_step", 0, 1, 2), KEPT_ANY)],
    "ch9.fold_block": [(6, "the block's own maximum first: NaN for a fully masked row", _fold_row_max, None),
                       (1, "one output buffer per shape", _buffer_per_shape("ch9.fold_block"), None)],
    "ch10.padded_logits": [(6, "padding found by ids != 0 (round 2)", _padded_by_nonzero, None),
                           (7, "dropout p set to 0 on the caller's model", _padded_dropout_zeroed,
                            "grader.changed_model_attribute")],
    "ch10.leaky_models": [(4, "the change averaged over the vocabulary", _leaky_mean, M + "ch10.leaky_models.mean_over_vocab"),
                          (7, "the caller's list emptied", _leaky_pops, I)],
    "ch10.cache_differs": [(4, "the difference averaged over the vocabulary", _cache_mean,
                            M + "ch10.cache_differs.mean_over_vocab"),
                           (3, "the course's cached_matches in a worker thread", _in_a_thread(
                               lambda models, ids, atol=1e-5: [not attnlab.audit.comparisons.cached_matches(m, ids, atol=atol)
                                                               for m in models]), COPY)],
    "ch11.score_grad": [(9, "as_strided assumes a contiguous input", _strided_inputs("ch11.score_grad"), None),
                        (1, "one output buffer per shape", _buffer_per_shape("ch11.score_grad"), CHANGED)],
    "ch11.tile_backward": [(6, "blocked rebuilt as a square triangle (round 2)", _tile_square_blocked, None),
                           (9, "as_strided assumes a contiguous input", _strided_inputs("ch11.tile_backward"), None)],
    "ch11.saved_bytes": [(2, "counts in int32 tensors", _saved_bytes_int32, None),
                         (2, "the byte counts as floats", _saved_bytes_float, FLOAT)],
    "ch11.backward_flops": [(3, "the course's blocked_backward counts them", _backward_flops_course, COPY),
                            (1, "kept per T, block and d left out", _memo_on("ch11.backward_flops", 0), KEPT_ANY)],
}


def _restoring_modes(fn):
    """A right answer of before issue 50 that calls model.eval() and leaves it so, now putting the modes back
    (issue 50: a model handed back in eval mode after training mode is named, grader.left_in_eval)."""
    def modules_of(value):
        if isinstance(value, torch.nn.Module):
            return [value]
        return [m for v in value for m in modules_of(v)] if isinstance(value, (list, tuple)) else []

    @functools.wraps(fn)
    def answer(*args, **kwargs):
        models = [m for a in args for m in modules_of(a)]
        modes = [[sub.training for sub in m.modules()] for m in models]
        try:
            return fn(*args, **kwargs)
        finally:
            for m, was in zip(models, modes):
                for sub, mode in zip(m.modules(), was):
                    sub.training = mode

    return answer


for _task_id in [t for t in RIGHT if t.startswith(("ch5.", "ch10."))]:
    RIGHT[_task_id] = _restoring_modes(RIGHT[_task_id])
for _task_id in [t for t in NEW_RIGHT if t.startswith(("ch5.", "ch10."))]:
    NEW_RIGHT[_task_id] = [(what, _restoring_modes(fn)) for what, fn in NEW_RIGHT[_task_id]]


# ---------------------------------------------------------------------------- chapter 12, issue 50
# Right on exercise 12's cases, wrong on its contract (the learner answers of the fourth outside set):
# positions, block ids and token ids in int16, which wrap past 32767.
ISSUE50_WRONG.update({
    "ch12.chunk_mask": [(2, "positions in int16", _chunk_int16, "grader.mutant.ch12.chunk_mask.narrow_positions")],
    "ch12.gather_kv": [(2, "block ids in int16", _gather_int16, "grader.mutant.ch12.gather_kv.narrow_ids")],
    # the key is not asked: a shrunk input's small answer often equals an earlier one, and the grader's
    # kept-answer check names it first
    "ch12.accepted_length": [(2, "token ids compared in int16", _accepted_int16, None)],
})
# end of chapter 12, issue 50


# The tests of every wrong answer (test_grader.WRONG_ANSWERS) run over the new ones too: one merge, after every
# section above has added its own (a section defined after an earlier merge had its new answers left untested).
for _task, _answers in NEW_WRONG.items():
    WRONG[_task] = WRONG[_task] + _answers
