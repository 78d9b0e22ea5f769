"""Ring attention on ``torch.distributed``: one sequence, P processes.

Each of the P ranks holds one shard of the queries, keys and values of a
sequence of T tokens (S = T / P tokens each). The key/value shards travel
around a ring: at step t (t = 0 .. P-1) rank r holds the keys and values of
rank (r - t) mod P, folds them into the online softmax of its own queries
(``attnlab.blocked.attend_tiles``, chapter 3's code) and meanwhile sends them
on to rank r + 1 and receives the next ones from rank r - 1. After P steps
every query has seen every key; the K/V of the whole sequence never sits on
one device. Ring Attention: Liu, Zaharia, Abbeel 2023, arXiv 2310.01889.

Which tokens a rank holds is the *layout*:

* ``contiguous``  rank r holds tokens r*S .. (r+1)*S - 1;
* ``striped``     token t goes to rank t mod P (Striped Attention:
  Brandon et al. 2023, arXiv 2311.09431);
* ``zigzag``      the sequence is cut into 2P chunks; rank r holds chunk r
  and chunk 2P-1-r (one early, one late).

With a causal mask the layout decides how much work each rank does; the
counts of every step are returned (:class:`RingStats`) and have closed forms
(:func:`expected_tiles`).

Running it
----------
In a notebook or a test, :func:`run_ring` starts P CPU processes with the
``gloo`` backend (``torch.multiprocessing`` with the start method
"forkserver", or "spawn" where there is none), lets them rendezvous on a
free port of 127.0.0.1 with one torch thread each, and returns every rank's
report. ``run_ring(jobs, P, code=...)`` runs the caller's own functions instead
of the package's (:func:`code_of`: their source text travels to every process),
so a learner's ``ring_attention`` or ``pass_on`` from a notebook runs on the ring.
The same functions run on GPUs with NCCL, one process per GPU,
started by ``torchrun``::

    torchrun --nproc-per-node=4 -m attnlab.ring --T 65536 --block 512 --layout zigzag
    torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d \\
        --rdzv-endpoint=HOST:29500 -m attnlab.ring --T 262144 --block 512

``torchrun`` sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT;
:func:`main` then picks ``nccl`` and ``cuda:LOCAL_RANK`` when CUDA is present
(``--backend gloo`` forces CPU processes; ``--check`` compares with SDPA on
the whole sequence, for small T). Without torchrun,
``python -m attnlab.ring --nproc 4`` starts CPU processes with :func:`run_ring`.
Point-to-point peers are ranks of the default process group.

One idea per module:

* :mod:`.layouts` — which tokens each rank holds, the tiles of every step, their closed forms;
* :mod:`.attention` — what every rank runs: ring attention, the all-gather, the passes alone;
* :mod:`.jobs` — one measurement (``RingJob``), what each rank reports, running jobs on a rank;
* :mod:`.callers_code` — the caller's own functions as source text on the ranks (``code=``);
* :mod:`.processes` — starting the gloo processes on this machine (``run_ring``);
* :mod:`.cli` — ``torchrun -m attnlab.ring`` and ``python -m attnlab.ring``.
"""

from __future__ import annotations

from ..blocked import attend_tiles  # chapter 3's, which every rank runs (chapter 9 shows it again)
from .attention import RingStats, StepStats, allgather_attention, clock, pass_around, pass_on, ring_attention
from .callers_code import code_of
from .cli import main, print_results
from .jobs import JobResult, RankReport, RingJob, check_job, make_inputs, run_jobs
from .layouts import LAYOUTS, check_sizes, expected_tiles, ring_schedule, shard_positions
from .processes import RingTimeout, free_port, run_ranks, run_ring

__all__ = ["LAYOUTS", "JobResult", "RankReport", "RingJob", "RingStats", "RingTimeout", "StepStats",
           "allgather_attention", "attend_tiles", "check_job", "check_sizes", "clock", "code_of", "expected_tiles",
           "free_port", "main", "make_inputs", "pass_around", "pass_on", "print_results", "ring_attention",
           "ring_schedule", "run_jobs", "run_ranks", "run_ring", "shard_positions"]
