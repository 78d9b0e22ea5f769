"""Training the small GPT: random windows of a token stream, next-token targets, AdamW.

Deterministic: the windows come from a seeded ``torch.Generator`` and the
weights from ``torch.manual_seed``, so the same call gives the same losses on
the same machine. Training runs on one CPU thread by default: how a float sum
is split between threads changes its last bits, and over hundreds of steps
those bits change the printed losses.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .gpt import GPT
from .i18n import tr
from .inputs import describe, positive_number, whole_number


def next_token_batch(data: torch.Tensor, block_size: int, batch_size: int,
                     generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` random windows of ``block_size + 1`` tokens from ``data`` [N].

    Returns inputs x = tokens 0..T-1 and targets y = tokens 1..T of each
    window, both [B, T]: y is x shifted left by one (teacher forcing).
    """
    block_size = whole_number("block_size", block_size, low=1)
    batch_size = whole_number("batch_size", batch_size, low=1)
    if generator is not None and not isinstance(generator, torch.Generator):  # a seed (an int) given instead
        raise TypeError(tr("error.generator", got=describe(generator)))
    if (not isinstance(data, torch.Tensor) or data.dim() != 1 or data.dtype != torch.long
            or data.numel() <= block_size):
        got = f"{describe(data)} {data.dtype}" if isinstance(data, torch.Tensor) else describe(data)
        raise ValueError(tr("error.token_stream", block_size=block_size, got=got))
    starts = torch.randint(0, data.numel() - block_size, (batch_size,), generator=generator)
    windows = torch.stack([data[s:s + block_size + 1] for s in starts.tolist()])  # [B, T+1]
    return windows[:, :-1], windows[:, 1:]


def train(model: GPT, data: torch.Tensor, steps: int, batch_size: int = 16, block_size: int | None = None,
          lr: float = 3e-3, seed: int = 0, num_threads: int | None = 1) -> list[float]:
    """Train ``model`` in place on ``data`` [N] for ``steps`` steps; returns the loss of every step.

    ``num_threads`` CPU threads during training (then torch's setting is
    restored); ``None`` keeps torch's setting.
    """
    steps = whole_number("steps", steps, low=0)
    lr = positive_number("lr", lr)
    previous = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    try:
        return _train(model, data, steps, batch_size, block_size or model.config.block_size, lr, seed)
    finally:
        torch.set_num_threads(previous)


def _train(model: GPT, data: torch.Tensor, steps: int, batch_size: int, block_size: int, lr: float,
           seed: int) -> list[float]:
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    model.train()
    losses = []
    for _ in range(steps):
        losses.append(train_step(model, optimizer, *next_token_batch(data, block_size, batch_size, generator)))
    model.eval()
    return losses


def train_step(model: GPT, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    """One step of teacher forcing (chapter 4 shows it): the loss of all B x T positions from one
    forward pass, its gradients, gradient clipping, one optimizer step. Returns the loss."""
    _, loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.item()


@torch.no_grad()
def evaluate(model: GPT, data: torch.Tensor, block_size: int | None = None, batches: int = 8,
             batch_size: int = 16, seed: int = 1) -> float:
    """Mean next-token loss on ``batches`` random windows (model in eval mode)."""
    block_size = block_size or model.config.block_size
    generator = torch.Generator().manual_seed(seed)
    model.eval()
    losses = [model(*next_token_batch(data, block_size, batch_size, generator))[1].item() for _ in range(batches)]
    return sum(losses) / len(losses)


def loss_prefix_by_prefix(model: GPT, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The slow, obviously honest loss (chapter 4): position t sees only ``x[:, :t+1]``,
    one forward pass per position. Returns the loss of every position, [B, T]."""
    losses = []
    with torch.no_grad():
        for t in range(x.size(1)):
            logits_t = model(x[:, : t + 1])[0][:, -1]  # [B, V]: the last position of the prefix
            losses.append(F.cross_entropy(logits_t, y[:, t], reduction="none"))  # [B]
    return torch.stack(losses, dim=1)  # [B, T]
