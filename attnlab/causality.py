"""Is my model causal? Tests of a WHOLE model, as functions you can run on your own (chapter 5).

A model is anything that maps token ids [B, T] (``torch.long``) to logits
[B, T, V], or to a tuple whose first element is the logits (as
:class:`~attnlab.gpt.GPT` does). Every test runs the model in eval mode (no
dropout) and puts it back in the mode it was in. Each map is [T, T], row =
output position t, column = input position s; a causal model has nothing
above the diagonal (s > t): in the prefix and cut maps up to rounding (they
compare runs of different shapes, a batch of 1 against a batch of T, T tokens
against fewer, and kernels may add in another order for another shape), in the
Jacobian map exactly 0 (gradients through weights that are exactly 0).

- :func:`dependence_map` (the prefix test, one position at a time): entry
  [t, s] is how far the logits at t move when only the token at s changes.
- :func:`cut_map`: entry [t, s] is how far the logits at t move when the
  sequence is cut before s (the model sees only the first s tokens), as in
  generation. It also catches a dependence on the *length* of the future.
- :func:`jacobian_map`: entry [t, s] is the size of the gradient of the
  output at t with respect to the input embedding at s (token ids are
  discrete; their embeddings are not). Causal means exactly 0 for s > t.
- :func:`assert_causal` runs the first two, :func:`assert_causal_jacobian`
  the third; both raise :class:`CausalityError` naming the first leaking
  (output position, input position) pair. :func:`find_leaks` runs all three
  and returns what each found.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from .i18n import tr
from .inputs import describe

TESTS = ("prefix", "cut", "jacobian")


class CausalityError(AssertionError):
    """The model is not causal: output position ``t`` depends on input position ``s`` > t."""

    def __init__(self, test: str, t: int, s: int, value: float, atol: float):
        self.test, self.t, self.s, self.value, self.atol = test, t, s, value, atol
        super().__init__(tr(f"ch5.leak_{test}", t=t, s=s, value=value, atol=atol))


def logits_of(model, idx: torch.Tensor) -> torch.Tensor:
    """The logits [B, T, V] of ``model(idx)``, whether it returns a tensor or (logits, loss)."""
    if not callable(model):
        raise TypeError(tr("ch5.not_callable", got=describe(model)))
    out = model(idx)
    logits = out[0] if isinstance(out, (tuple, list)) and out else out
    if (not isinstance(logits, torch.Tensor) or not logits.is_floating_point() or logits.dim() != 3
            or logits.shape[:2] != idx.shape):
        got = f"{describe(logits)} {logits.dtype}" if isinstance(logits, torch.Tensor) else describe(logits)
        raise ValueError(tr("ch5.bad_output", shape=tuple(idx.shape), got=got))
    return logits


@contextmanager
def eval_mode(model):
    """Run ``model`` in eval mode (dropout off), then restore its mode."""
    was_training = getattr(model, "training", False)
    if isinstance(model, nn.Module):
        model.eval()
    try:
        yield model
    finally:
        if isinstance(model, nn.Module):
            model.train(was_training)


def find_token_embedding(model) -> nn.Embedding:
    """The model's token embedding: a module named ``*token_embedding``, else its first ``nn.Embedding``."""
    modules = list(model.named_modules()) if isinstance(model, nn.Module) else []
    for name, module in modules:
        if name.endswith("token_embedding") and isinstance(module, nn.Embedding):
            return module
    for _, module in modules:
        if isinstance(module, nn.Embedding):
            return module
    raise ValueError(tr("ch5.no_embedding"))


def vocab_size_of(model, idx: torch.Tensor | None = None) -> int:
    """V: from ``model.config``, else its token embedding, else (a plain function such as
    ``lambda ids: model(preprocess(ids))``) the size of the logits it returns for ``idx``."""
    if isinstance(getattr(model, "vocab_size", None), int):  # an adapter says it (a multimodal model's text vocabulary)
        return model.vocab_size
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "vocab_size"):
        return config.vocab_size
    if isinstance(model, nn.Module) and any(isinstance(m, nn.Embedding) for m in model.modules()):
        return find_token_embedding(model).num_embeddings
    if idx is None:
        raise ValueError(tr("ch5.no_vocab", got=describe(model)))
    with torch.no_grad():
        return logits_of(model, idx).size(-1)


def example_tokens(model, T: int = 16, seed: int = 0) -> torch.Tensor:
    """[1, T] random token ids (seeded) for ``model``, on the model's device (drawn on the CPU, so the
    same seed gives the same tokens on every device)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size_of(model), (1, T), generator=generator).to(device_of(model))


def device_of(model) -> torch.device:
    """Where ``model``'s parameters live (the CPU for a plain function or a model without any)."""
    parameters = model.parameters() if isinstance(model, nn.Module) else iter(())
    return next((p.device for p in parameters), torch.device("cpu"))


def as_sequence(idx: torch.Tensor) -> torch.Tensor:
    """``idx`` as ONE sequence of token ids, [1, T] (a [T] tensor is accepted); a clear error otherwise."""
    if not isinstance(idx, torch.Tensor):
        raise ValueError(tr("ch5.bad_idx", shape=describe(idx), dtype=type(idx).__name__))
    if idx.dim() == 1:
        idx = idx.unsqueeze(0)
    if idx.dim() != 2 or idx.size(0) != 1 or idx.dtype != torch.long or idx.size(1) < 2:
        raise ValueError(tr("ch5.bad_idx", shape=str(tuple(idx.shape)), dtype=str(idx.dtype)))
    return idx


def in_vocabulary(model, idx: torch.Tensor, embedding: nn.Module | None = None) -> torch.Tensor:
    """``idx`` if every id is below the model's vocabulary size, where the model says it (``config.vocab_size``
    or its token embedding) or where ``embedding`` (an ``nn.Embedding``, given for a plain function such as
    ``lambda ids: model(input_ids=ids).logits``) does; a clear error instead of an ``IndexError`` from inside
    the embedding."""
    config = getattr(model, "config", None)
    V = model.vocab_size if isinstance(getattr(model, "vocab_size", None), int) else getattr(config, "vocab_size", None)
    if V is None and isinstance(embedding, nn.Embedding):
        V = embedding.num_embeddings
    if V is None and isinstance(model, nn.Module) and any(isinstance(m, nn.Embedding) for m in model.modules()):
        V = find_token_embedding(model).num_embeddings
    if V is not None and (int(idx.min()) < 0 or int(idx.max()) >= V):
        raise ValueError(tr("error.token_range", high=V - 1, low_got=int(idx.min()), high_got=int(idx.max())))
    return idx


def dependence_map(model, idx: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """[T, T]: entry [t, s] = max |Δ logits at t| when only the token at s is changed.

    All T changed sequences run as one batch of T: row s of the batch has a
    different (random, seeded) token at position s. The map is on the CPU, wherever the model runs.
    """
    idx = as_sequence(idx)
    T, V = idx.size(1), vocab_size_of(model, idx)
    shift = torch.randint(1, V, (T,), generator=torch.Generator().manual_seed(seed)).to(idx.device)  # never 0: a new token
    changed = idx.repeat(T, 1)  # [T, T]: sequence s has a new token at position s
    changed[torch.arange(T), torch.arange(T)] = (idx[0] + shift) % V
    with eval_mode(model), torch.no_grad():
        base = logits_of(model, idx)  # [1, T, V]
        moved = logits_of(model, changed)  # [T (changed s), T (output t), V]
    return (moved - base).abs().amax(dim=-1).T.cpu()  # [t, s]


def cut_map(model, idx: torch.Tensor) -> torch.Tensor:
    """[T, T]: entry [t, s] = max |Δ logits at t| when the model sees only tokens 0..s-1.

    Only t < s is measured (a cut before s removes the outputs from s on); the
    rest of the map is NaN. The map is on the CPU, wherever the model runs.
    """
    idx = as_sequence(idx)
    T = idx.size(1)
    out = torch.full((T, T), float("nan"))  # t >= s is not measured: the cut removes those outputs
    with eval_mode(model), torch.no_grad():
        full = logits_of(model, idx)  # [1, T, V]
        for s in range(1, T):
            part = logits_of(model, idx[:, :s])  # [1, s, V]
            out[:s, s] = (part - full[:, :s]).abs().amax(dim=-1)[0].cpu()
    return out


def jacobian_map(model, idx: torch.Tensor, embedding: nn.Embedding | None = None, seed: int = 0) -> torch.Tensor:
    """[T, T]: entry [t, s] = || d(output t) / d(embedding of input s) ||.

    Output t is its logits projected on a fixed random direction (seeded), so
    one backward pass per position suffices; a dependence hides from a random
    direction only by accident of probability zero. Forward hooks on
    ``embedding`` first record what it returns, then replace it by the tensor
    we differentiate with respect to.
    """
    idx = as_sequence(idx)
    embedding = embedding or find_token_embedding(model)
    seen = []
    with eval_mode(model):
        handle = embedding.register_forward_hook(lambda module, args, output: seen.append(output.detach()))
        try:
            with torch.no_grad():
                V = logits_of(model, idx).size(-1)  # also records the embeddings: seen[0], [1, T, D]
        finally:
            handle.remove()
        directions = torch.randn(idx.size(1), V, generator=torch.Generator().manual_seed(seed)).to(idx.device)  # [T, V]

        def outputs(x):  # [1, T, D] embeddings -> [T]: each position's logits, projected on its direction
            # the embedding now returns x, but only an output of x's shape: a model may call its embedding
            # twice (LED's encoder embeds its padding in a second call)
            handle = embedding.register_forward_hook(lambda module, args, output: x if output.shape == x.shape else output)
            try:
                logits = logits_of(model, idx)[0]  # [T, V]
            finally:
                handle.remove()
            return (logits * directions).sum(dim=-1)

        jac = torch.autograd.functional.jacobian(outputs, seen[0])  # [T, 1, T, D], or [T, T, 1, D] sequence first
    return jac.reshape(jac.size(0), -1, jac.size(-1)).norm(dim=-1).cpu()  # [t, s], on the CPU (XLNet embeds [T, 1, D])


def first_leak(leak_map: torch.Tensor, atol: float = 0.0) -> tuple[int, int] | None:
    """The first (t, s) with s > t and ``leak_map[t, s] > atol`` (smallest t, then smallest s), or None."""
    T = leak_map.size(0)
    future = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)
    leaks = ((leak_map > atol) & future).nonzero()
    return tuple(leaks[0].tolist()) if len(leaks) else None


def future_max(leak_map: torch.Tensor) -> float:
    """The largest entry above the diagonal (0.0 for a causal model)."""
    T = leak_map.size(0)
    return float(leak_map[torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)].max())


def _check_atol(model, idx: torch.Tensor, atol: float) -> float:
    """``atol`` as a float >= 0 that the model's float type can resolve (a clear error otherwise)."""
    if isinstance(atol, bool) or not isinstance(atol, (int, float)) or not atol >= 0:
        raise ValueError(tr("ch5.bad_atol", got=describe(atol)))
    with eval_mode(model), torch.no_grad():
        dtype = logits_of(model, idx).dtype
    eps = torch.finfo(dtype).eps
    if eps > atol and dtype in (torch.bfloat16, torch.float16):  # rounding alone moves logits by ~1e-3 between lengths
        raise ValueError(tr("ch5.low_precision", dtype=str(dtype), eps=eps, atol=atol))
    if eps > atol:  # atol = 0 or below float32's step: the cut test's shorter inputs round differently
        raise ValueError(tr("ch5.atol_below_rounding", dtype=str(dtype), eps=eps, atol=atol))
    return float(atol)


def _raise_first(test: str, leak_map: torch.Tensor, atol: float) -> None:
    leak = first_leak(leak_map, atol)
    if leak is not None:
        t, s = leak
        raise CausalityError(test, t, s, float(leak_map[t, s]), atol)


def assert_causal(model, idx: torch.Tensor | None = None, atol: float = 1e-5, T: int = 16, seed: int = 0) -> float:
    """Prefix test (change one later token) and cut test (drop the later tokens) on ``idx``
    [1, T] (random tokens if None). Raises :class:`CausalityError` for the first leaking
    pair; returns the largest change above the diagonal (below ``atol``)."""
    idx = example_tokens(model, T, seed) if idx is None else in_vocabulary(model, as_sequence(idx))
    atol = _check_atol(model, idx, atol)
    maps = {"prefix": dependence_map(model, idx, seed), "cut": cut_map(model, idx)}
    for test, leak_map in maps.items():
        _raise_first(test, leak_map, atol)
    return max(future_max(m) for m in maps.values())


def _checked_jacobian_map(model, idx: torch.Tensor, embedding: nn.Module | None, seed: int) -> torch.Tensor:
    """:func:`jacobian_map`, with clear errors when the embedding is not on the model's path:
    never called (the hooks see nothing) or without any effect on the outputs (all zeros,
    which would pass as causal)."""
    embedding = embedding or find_token_embedding(model)
    if not isinstance(embedding, nn.Module):
        raise TypeError(tr("ch5.bad_embedding", got=describe(embedding)))
    calls = []
    handle = embedding.register_forward_hook(lambda module, args, output: calls.append(output))
    try:
        with eval_mode(model), torch.no_grad():
            logits_of(model, idx)
    finally:
        handle.remove()
    if not calls:
        raise ValueError(tr("ch5.embedding_unused", got=type(embedding).__name__))
    out = calls[0]
    columns = getattr(model, "real_columns", None)  # a padding adapter (chapter 10): where the real tokens are
    padded = (callable(columns) and isinstance(out, torch.Tensor) and out.dim() == 3
              and out.size(0) == idx.size(0) and out.size(1) > idx.size(1))
    layouts = (tuple(idx.shape), tuple(idx.shape)[::-1])  # [B, T, D], or sequence first [T, B, D] (XLNet)
    if not padded and (not isinstance(out, torch.Tensor) or out.dim() != 3 or tuple(out.shape[:2]) not in layouts):
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else describe(out)
        raise ValueError(tr("error.embedding_shape", name=type(embedding).__name__, idx=tuple(idx.shape),
                            T=idx.size(1), got=got))
    jac = jacobian_map(model, idx, embedding, seed)
    if padded:  # [T, pad + T]: the columns of the real tokens
        jac = jac[:, columns(idx.size(1))]
    if not bool(torch.diagonal(jac).any()):
        raise ValueError(tr("ch5.embedding_unused", got=type(embedding).__name__))
    return jac


def assert_causal_jacobian(model, idx: torch.Tensor | None = None, embedding: nn.Embedding | None = None,
                           T: int = 16, seed: int = 0) -> None:
    """The gradient test: every d(output t)/d(embedding s) with s > t must be exactly 0.
    Raises :class:`CausalityError` for the first pair where it is not."""
    idx = example_tokens(model, T, seed) if idx is None else in_vocabulary(model, as_sequence(idx), embedding)
    _raise_first("jacobian", _checked_jacobian_map(model, idx, embedding, seed), 0.0)


def find_leaks(model, idx: torch.Tensor | None = None, atol: float = 1e-5, T: int = 16, seed: int = 0,
               embedding: nn.Embedding | None = None) -> dict[str, tuple[int, int] | None]:
    """What each test finds: ``{"prefix": (t, s) or None, "cut": ..., "jacobian": ...}``
    (``embedding``: the token embedding, for a model that is a plain function)."""
    idx = example_tokens(model, T, seed) if idx is None else in_vocabulary(model, as_sequence(idx), embedding)
    atol = _check_atol(model, idx, atol)
    return {"prefix": first_leak(dependence_map(model, idx, seed), atol),
            "cut": first_leak(cut_map(model, idx), atol),
            "jacobian": first_leak(_checked_jacobian_map(model, idx, embedding, seed), 0.0)}
