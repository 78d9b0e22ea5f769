"""A paged KV cache (chapter 12), as vLLM's PagedAttention keeps it (Kwon et al. 2023).

A contiguous cache (``attnlab.gpt.KVCache``) reserves ``max_len`` positions per sequence up
front, whether the sequence uses them or not. A paged cache cuts the memory into fixed-size
**blocks** of ``block_size`` positions (one pool, :class:`BlockPool`) and gives a sequence a new
block only when its last one is full. Each sequence keeps a **block table**: the ids of its
blocks, in the order of its positions; position p lives in block ``table[p // block_size]`` at
slot ``p % block_size``. Attention reads the keys and values through the table
(:func:`gather_kv`).

Blocks can be shared: a request that starts with a cached prefix (a system prompt) gets a table
that points at the prefix's blocks (:meth:`PagedSequence.fork`) and a reference count per block
says how many tables hold it. Before a sequence writes into a block that another table also
holds, it copies that block (**copy-on-write**), so the other sequence keeps its keys and values.

:class:`PagedSequence` has the methods the course's GPT calls on a cache (``check_fits``,
``update``, ``advance``, ``pos``), so ``model(ids, cache=sequence)`` runs on pages. Here the
gather copies the blocks into one tensor before SDPA; vLLM's attention kernel reads them in
place, block by block (vLLM's paged_attention kernel, FlashAttention and FlashInfer with a
``block_table``): the copy here costs time on every layer and step that theirs does not.
"""

from __future__ import annotations

import torch

from .gpt import GPTConfig
from .i18n import tr
from .inputs import describe, whole_number


class BlockPool:
    """The memory of a paged cache: ``k`` and ``v`` are [L, num_blocks, H_kv, block_size, d];
    free blocks are handed out lowest id first, and each block has a reference count."""

    def __init__(self, config: GPTConfig, num_blocks: int, block_size: int,
                 device: torch.device | str | None = None, dtype: torch.dtype = torch.float32):
        if not isinstance(config, GPTConfig):
            raise TypeError(tr("ch12.err_pool_config", got=type(config).__name__))
        self.num_blocks = whole_number("num_blocks", num_blocks, low=1)
        self.block_size = whole_number("block_size", block_size, low=1)
        self.config = config
        shape = (config.n_layer, self.num_blocks, config.kv_heads, self.block_size, config.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)  # [L, num_blocks, H_kv, block_size, d]
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.refs = [0] * self.num_blocks  # how many block tables hold each block
        self.copies = 0  # blocks copied on write

    def allocate(self) -> int:
        """A free block (the lowest id), now held by one table."""
        free = [b for b, n in enumerate(self.refs) if n == 0]
        if not free:
            raise ValueError(tr("ch12.err_pool_full", n=self.num_blocks, block_size=self.block_size,
                                used=self.blocks_in_use, blocks=1))
        self.refs[free[0]] = 1
        return free[0]

    def share(self, block: int) -> None:
        self.refs[block] += 1

    def release(self, block: int) -> None:
        """One table less holds ``block``; at 0 it is free again."""
        if self.refs[block] <= 0:
            raise ValueError(tr("ch12.err_block_free", block=block))
        self.refs[block] -= 1

    def copy_on_write(self, block: int) -> int:
        """A private copy of a shared ``block`` for the table that is about to write into it."""
        copy = self.allocate()
        self.k[:, copy], self.v[:, copy] = self.k[:, block], self.v[:, block]
        self.release(block)
        self.copies += 1
        return copy

    @property
    def blocks_in_use(self) -> int:
        return sum(n > 0 for n in self.refs)

    @property
    def bytes_per_block(self) -> int:
        """2 (K and V) x L x H_kv x block_size x d x bytes per number."""
        return 2 * self.k[:, 0].nbytes

    @property
    def bytes_in_use(self) -> int:
        return self.blocks_in_use * self.bytes_per_block


def gather_kv(blocks, block_table, length):
    check_gather_inputs(blocks, block_table, length)  # clear errors for a wrong table or length
    table = torch.as_tensor(block_table, dtype=torch.long, device=blocks.device)  # [n]: this sequence's block ids
    picked = blocks[table]  # [n, H, block_size, d]: its blocks, in the order of its positions
    return picked.transpose(0, 1).flatten(1, 2)[:, :length]  # [H, n * block_size, d] -> [H, length, d]


def check_gather_inputs(blocks, block_table, length) -> None:
    if not isinstance(blocks, torch.Tensor) or blocks.dim() != 4:
        raise ValueError(tr("ch12.err_blocks", got=describe(blocks)))
    if isinstance(block_table, torch.Tensor):
        ok = block_table.dim() == 1 and not block_table.is_floating_point() and block_table.dtype != torch.bool
        ids = block_table.tolist() if ok else []
    else:  # a list or tuple of whole numbers; an empty table holds no positions
        ok = isinstance(block_table, (list, tuple)) and all(
            isinstance(b, int) and not isinstance(b, bool) for b in block_table)
        ids = list(block_table) if ok else []
    if not ok:
        raise ValueError(tr("ch12.err_table", got=describe(block_table)))
    if ids and not 0 <= min(ids) <= max(ids) < blocks.size(0):
        raise ValueError(tr("ch12.err_table_ids", high=blocks.size(0) - 1, got=ids))
    whole_number("length", length, 0, len(ids) * blocks.size(2))


class PagedSequence:
    """One sequence in a :class:`BlockPool`: its block table and its length ``pos``.

    A cache for the course's GPT with batch size 1: ``model(ids, cache=sequence)``.
    """

    def __init__(self, pool: BlockPool):
        if not isinstance(pool, BlockPool):
            raise TypeError(tr("ch12.err_pool", got=describe(pool)))
        self.pool = pool
        self.block_table: list[int] = []
        self.pos = 0  # positions filled

    def fork(self) -> PagedSequence:
        """A new sequence that starts with this one's positions, sharing its blocks (nothing copied)."""
        other = PagedSequence(self.pool)
        other.block_table, other.pos = list(self.block_table), self.pos
        for block in self.block_table:
            self.pool.share(block)
        return other

    def reserve(self, n: int) -> None:
        """Make positions pos .. pos+n-1 writable: new blocks at the end, and a private copy of
        every block among them that another table holds too (copy-on-write)."""
        n = whole_number("n", n, low=0)
        if n == 0:
            return
        self.check_room(n)
        size, last = self.pool.block_size, self.pos + n - 1
        while len(self.block_table) * size <= last:
            self.block_table.append(self.pool.allocate())
        for i in range(self.pos // size, last // size + 1):
            if self.pool.refs[self.block_table[i]] > 1:
                self.block_table[i] = self.pool.copy_on_write(self.block_table[i])

    def update(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store [1, H_kv, T_new, d] keys and values at pos ..; return all of them through the block
        table, [1, H_kv, pos + T_new, d]."""
        L, _, H, _, d = self.pool.k.shape
        whole_number("layer", layer, 0, L - 1)
        if k_new.dim() != 4 or k_new.shape != v_new.shape or (k_new.size(0), k_new.size(1), k_new.size(3)) != (1, H, d):
            raise ValueError(tr("error.cache_shape", B=1, H=H, d=d, k=tuple(k_new.shape), v=tuple(v_new.shape)))
        T_new = k_new.size(2)
        self.reserve(T_new)
        positions = torch.arange(self.pos, self.pos + T_new, device=self.pool.k.device)  # [T_new]
        table = torch.tensor(self.block_table, dtype=torch.long, device=self.pool.k.device)
        blocks, slots = table[positions // self.pool.block_size], positions % self.pool.block_size
        self.pool.k[layer, blocks, :, slots] = k_new[0].transpose(0, 1)  # [T_new, H, d] into their slots
        self.pool.v[layer, blocks, :, slots] = v_new[0].transpose(0, 1)
        end = self.pos + T_new
        return (gather_kv(self.pool.k[layer], self.block_table, end)[None],
                gather_kv(self.pool.v[layer], self.block_table, end)[None])

    def advance(self, n: int) -> None:
        """Mark ``n`` more positions as filled: they must have been reserved (``update`` reserves them)."""
        n = whole_number("n", n, low=0)
        room = len(self.block_table) * self.pool.block_size
        if self.pos + n > room:
            raise ValueError(tr("ch12.err_advance", n=n, pos=self.pos, room=room))
        self.pos += n

    def check_room(self, n: int) -> None:
        """A clear error before ``n`` more positions are reserved in a pool that cannot hold them: too small
        for this sequence alone, or full because other sequences hold its blocks."""
        size = self.pool.block_size
        needed = -(-(self.pos + n) // size) - len(self.block_table)  # new blocks at the end
        shared = sum(self.pool.refs[b] > 1 for b in self.block_table[self.pos // size:])  # copied on write
        if needed + shared <= self.pool.refs.count(0):
            return
        if len(self.block_table) + needed > self.pool.num_blocks:
            raise ValueError(tr("ch12.err_pool_small", n=self.pool.num_blocks, block_size=size,
                                positions=self.pos + n, blocks=len(self.block_table) + needed))
        raise ValueError(tr("ch12.err_pool_full", n=self.pool.num_blocks, block_size=size,
                            used=self.pool.blocks_in_use, blocks=needed + shared))

    def check_fits(self, config: GPTConfig, batch_size: int, T_new: int) -> None:
        """Clear errors before a forward pass: another model's shapes, a batch, a full pool."""
        if not config.causal:
            raise ValueError(tr("error.cache_bidirectional"))
        L, _, H, _, d = self.pool.k.shape
        if (L, H, d) != (config.n_layer, config.kv_heads, config.head_dim):
            raise ValueError(tr("error.cache_model", L=L, H=H, d=d, model_L=config.n_layer,
                                model_H=config.kv_heads, model_d=config.head_dim))
        if batch_size != 1:
            raise ValueError(tr("ch12.err_paged_batch", B=batch_size))
        if T_new:
            self.check_room(T_new)

    def release(self) -> None:
        """Give every block back (a finished request)."""
        for block in self.block_table:
            self.pool.release(block)
        self.block_table, self.pos = [], 0


def contiguous_bytes(config: GPTConfig, lengths, max_len: int, bytes_per_number: int = 4) -> dict:
    """Bytes reserved and used when every sequence gets its own ``max_len`` positions."""
    per_position = 2 * config.n_layer * config.kv_heads * config.head_dim * bytes_per_number
    lengths = [whole_number("length", n, 0, max_len) for n in lengths]
    return {"reserved": len(lengths) * max_len * per_position, "used": sum(lengths) * per_position}
