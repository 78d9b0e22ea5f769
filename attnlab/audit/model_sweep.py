"""Every causal language model of ``transformers``, one command: the sweep, its table and its JSON.

:func:`sweep_targets` lists every class the library registers for causal language modelling, then a few
configs, encoders and encoder-decoders; :func:`sweep` audits each in its own process, with a memory cap
and a time limit (:func:`~attnlab.audit.verdicts.audit_target`), a few at a time; :func:`sweep_table`,
:func:`sweep_summary` and :func:`sweep_json` show or store the verdicts.
"""

from __future__ import annotations

import torch

from ..i18n import display_width as _width
from ..i18n import tr
from ..inputs import describe, whole_number
from .errors import one_line
from .library import _mappings, require_transformers
from .model_audit import IMPLEMENTATIONS, PADDINGS
from .verdicts import KINDS, Verdict, audit_target

ENCODERS = ("BertForMaskedLM", "RobertaForMaskedLM", "XLMRobertaForMaskedLM", "DistilBertForMaskedLM",
            "ElectraForMaskedLM", "AlbertForMaskedLM", "DebertaV2ForMaskedLM", "ModernBertForMaskedLM",
            "RoFormerForMaskedLM")
ENCODER_DECODERS = ("T5ForConditionalGeneration", "MT5ForConditionalGeneration", "BartForConditionalGeneration",
                    "PegasusForConditionalGeneration", "MarianMTModel", "MBartForConditionalGeneration",
                    "BlenderbotForConditionalGeneration", "LEDForConditionalGeneration")
CONFIGS = ("LlamaConfig", "MistralConfig", "MixtralConfig", "Qwen2Config", "Qwen3Config", "GPT2Config", "GemmaConfig",
           "Gemma2Config", "Gemma3TextConfig", "PhiConfig", "Phi3Config", "GPTNeoXConfig", "OPTConfig", "FalconConfig")


def sweep_targets() -> list[str]:
    """Every class ``transformers`` registers for causal language modelling, then a few configs,
    encoders (masked LMs) and encoder-decoders: the targets of ``--all``, sorted within each group."""
    tf = require_transformers()
    causal = sorted(_mappings(tf)["causal"])
    extra = [name for name in CONFIGS + ENCODERS + ENCODER_DECODERS if hasattr(tf, name)]
    return [name for name in causal if hasattr(tf, name)] + extra


MEMORY = 6 * 2**30  # bytes of address space a target of the sweep may take (a tiny model needs far less)


def _child(connection, target, implementations, paddings, T):
    torch.set_num_threads(1)
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    except (ImportError, ValueError, OSError):  # not on this system: no cap
        pass
    import time

    try:
        verdict = audit_target(target, implementations, paddings, T)
    except BaseException as error:  # noqa: BLE001 - a bad target is a row of the sweep, not a crash of it
        verdict = Verdict(str(target), "could_not_audit", [], [], one_line(error))
    verdict.cpu_seconds = time.process_time()  # this process's CPU time: the audit's, on one thread
    connection.send(verdict.to_dict())
    connection.close()


def _cpu_seconds(process) -> float | None:
    """The CPU time a child process has used so far (Linux: /proc), or ``None`` where it cannot be read."""
    import os

    try:
        with open(f"/proc/{process.pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime, in ticks
    except (OSError, ValueError, IndexError):
        return None


WALL_FACTOR = 10  # a target's wall-clock limit, in units of its CPU-time limit (a process that waits, not works)


def _bar(done: int, total: int, width: int = 30) -> str:
    filled = width * done // max(total, 1)
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


def sweep(targets=None, implementations=IMPLEMENTATIONS, paddings=PADDINGS, T: int = 8, workers: int = 2,
          limit: float = 120.0, progress=None, done=None) -> list[Verdict]:
    """:func:`audit_target` for every target (default :func:`sweep_targets`), each in its own process
    with a time limit of ``limit`` seconds of CPU time (then: could not audit; a machine shared with other
    work slows the wall clock, not the CPU time a target needs; where the CPU time cannot be read, and as a
    last resort for a process that waits, ``WALL_FACTOR`` times ``limit`` of wall-clock time), ``workers``
    at a time. ``progress``: a stream for a progress bar (``sys.stderr`` from the command line), or ``None``."""
    import multiprocessing
    import time

    targets = list(sweep_targets() if targets is None else targets)
    workers = whole_number("workers", workers, 1)
    if not isinstance(limit, (int, float)) or isinstance(limit, bool) or limit <= 0:
        raise ValueError(tr("audit.bad_limit", got=describe(limit)))
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    results, waiting, running = {}, list(enumerate(targets)), {}
    while waiting or running:
        while waiting and len(running) < workers:
            index, target = waiting.pop(0)
            receive, send = context.Pipe(duplex=False)
            process = context.Process(target=_child, args=(send, target, tuple(implementations), tuple(paddings), T),
                                      daemon=True)
            process.start()
            send.close()
            running[index] = (target, process, receive, time.monotonic())
        for index, (target, process, receive, started) in list(running.items()):
            elapsed = time.monotonic() - started
            cpu = _cpu_seconds(process)
            verdict = None
            if (cpu if cpu is not None else elapsed) > limit or elapsed > WALL_FACTOR * limit:  # first: a verdict
                # seen only after the limit came too late (this loop's 0.05 s sleep can take seconds, and a short
                # audit ends meanwhile)
                process.kill()
                verdict = Verdict.keyed(target, "could_not_audit", "audit.reason_timeout", seconds=f"{limit:g}")
            elif receive.poll():
                try:
                    verdict = Verdict.from_dict(receive.recv())
                except EOFError:
                    verdict = Verdict.keyed(target, "could_not_audit", "audit.reason_died", code=process.exitcode)
            elif not process.is_alive():
                verdict = Verdict.keyed(target, "could_not_audit", "audit.reason_died", code=process.exitcode)
            if verdict is not None:
                process.join(5)
                receive.close()
                if verdict.seconds is None:
                    verdict.seconds = elapsed
                results[index] = verdict
                del running[index]
                if done is not None:  # e.g. write what is known so far
                    done([results[i] for i in sorted(results)])
                if progress is not None:
                    print(f"\r{_bar(len(results), len(targets))} {target[:40]:<40}", end="", file=progress, flush=True)
        time.sleep(0.05)
    if progress is not None:
        print(file=progress)
    return [results[i] for i in range(len(targets))]


def sweep_table(verdicts: list[Verdict], lang: str | None = None) -> str:
    """One line per target: the class, the verdict, the packing check's word, the reason (a second line of it,
    what crashed after a leak, indented below)."""
    lines = [[tr("audit.col_target", lang=lang), tr("audit.col_verdict", lang=lang), tr("audit.col_packing", lang=lang),
              tr("audit.col_reason", lang=lang)]]
    lines += [[v.target, v.word(lang), "-" if v.packing is None else v.packing.word(lang), v.reason(lang)]
              for v in verdicts]
    widths = [max(_width(line[i]) for line in lines) + 2 for i in range(3)]
    return "\n".join("".join(cell + " " * (w - _width(cell)) for w, cell in zip(widths, line[:3]))
                     + line[3].replace("\n", "\n" + " " * sum(widths)) for line in lines)


def sweep_summary(verdicts: list[Verdict], lang: str | None = None) -> str:
    counts = {kind: sum(v.kind == kind for v in verdicts) for kind in KINDS}
    parts = [f"{tr(f'audit.kind_{kind}', lang=lang)} {counts[kind]}" for kind in KINDS if counts[kind]]
    return tr("audit.sweep_summary", lang=lang, n=len(verdicts), counts=tr("audit_page.list_sep", lang=lang).join(parts))


def sweep_json(verdicts: list[Verdict], **settings) -> dict:
    """What ``--all --json`` writes: the versions, the settings of the sweep, every verdict."""
    tf = require_transformers()
    return {"transformers": tf.__version__, "torch": torch.__version__.split("+")[0], **settings,
            "verdicts": [v.to_dict() for v in verdicts]}
