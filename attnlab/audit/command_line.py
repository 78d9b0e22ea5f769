"""The command line: ``python -m attnlab.audit MODEL_CLASS_OR_CONFIG`` or ``python -m attnlab.audit --all``.

:func:`main` audits one target and prints its table and verdict, or sweeps every causal-LM class of
``transformers`` (``--all``, with a progress bar and ``--json``); usage, help and errors are in the
reader's language (``--lang``, for this call only). The exit status says what was found: 0 as
expected, 1 a leak or a difference, 2 a bad argument or a target that could not be audited.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..i18n import get_language, set_language, tr
from ..inputs import describe, whole_number
from .model_audit import IMPLEMENTATIONS, PADDINGS, audit_table
from .model_sweep import sweep, sweep_json, sweep_summary, sweep_table
from .models import MODELS, check_implementation
from .verdicts import audit_target, verdict_line


class _Formatter(argparse.HelpFormatter):
    def add_usage(self, usage, actions, groups, prefix=None):
        prefix = tr("audit.cli_usage")  # "usage:", "用法：" (no space after a full-width colon)
        super().add_usage(usage, actions, groups, prefix if prefix.endswith("：") else prefix + " ")

    def start_section(self, heading):
        super().start_section(None if heading is None else heading + "\x00")  # argparse adds ":" after it


class _Parser(argparse.ArgumentParser):
    """argparse with the course's messages: usage, headings, help and errors in the reader's language
    (a Chinese heading ends in a full-width colon, with no space after it), a bad argument one localized
    line and exit status 2."""

    def __init__(self, **kwargs):
        super().__init__(formatter_class=_Formatter, add_help=False, allow_abbrev=False, **kwargs)
        self._positionals.title, self._optionals.title = tr("audit.cli_positionals"), tr("audit.cli_options")
        self.add_argument("-h", "--help", action="help", help=tr("audit.cli_help"))

    def format_help(self):
        return super().format_help().replace("\x00:", tr("audit.colon").rstrip())

    def error(self, message):
        import re

        expects = re.match(r"argument (\S+?)(?:/\S+)?: expected one argument", message)
        if expects:
            message = tr("audit.cli_expects_value", option=expects.group(1))
        elif message.startswith("unrecognized arguments: "):
            message = tr("audit.cli_unknown", got=message.split(": ", 1)[1])
        self.exit(2, tr("audit.cli_error", usage=self.format_usage().strip(), message=message) + "\n")


def main(argv=None) -> int:
    """The command line; ``--lang`` holds for this call only (a notebook keeps its language)."""
    before = get_language()
    try:
        return _main(argv)
    finally:
        set_language(before)


def _number(text, name, kind=int):
    try:
        return kind(text)
    except (TypeError, ValueError):
        return None


def _main(argv=None) -> int:
    import json

    argv = sys.argv[1:] if argv is None else list(argv)
    lang = os.environ.get("ATTNLAB_LANG")
    for i, arg in enumerate(argv):  # the language first, so that every later message is in it
        value = arg.split("=", 1)[1] if arg.startswith("--lang=") else argv[i + 1] if arg == "--lang" and \
            i + 1 < len(argv) else None
        if value is not None:
            lang = value
    if lang is not None and lang not in ("en", "de", "zh"):
        print(tr("audit.cli_bad_lang", got=describe(lang)), file=sys.stderr)
        return 2
    if lang:  # else the current language (a notebook's)
        set_language(lang)
    parser = _Parser(prog="python -m attnlab.audit", description=tr("audit.cli_description"))
    parser.add_argument("target", nargs="?", help=tr("audit.cli_target", options=", ".join(MODELS)))
    parser.add_argument("--implementations", default=",".join(IMPLEMENTATIONS), help=tr("audit.cli_implementations"))
    parser.add_argument("--length", default="8", help=tr("audit.cli_length"))
    parser.add_argument("--all", action="store_true", help=tr("audit.cli_all"))
    parser.add_argument("--workers", default="2", help=tr("audit.cli_workers"))
    parser.add_argument("--limit", default="120", help=tr("audit.cli_limit"))
    parser.add_argument("--json", default=None, help=tr("audit.cli_json"))
    parser.add_argument("--lang", help=tr("audit.cli_lang"))
    args, unknown = parser.parse_known_args(argv)
    if unknown or (args.target is None) == (not args.all):
        parser.error(tr("audit.cli_unknown", got=" ".join(unknown)) if unknown
                     else tr("audit.cli_target_and_all") if args.all
                     else tr("audit.cli_no_target", options=", ".join(MODELS)))
    length = _number(args.length, "--length")
    if length is None:
        print(tr("audit.cli_bad_length", got=describe(args.length)), file=sys.stderr)
        return 2
    implementations = tuple(impl.strip() for impl in args.implementations.split(",") if impl.strip())
    try:
        if not implementations:
            raise ValueError(tr("audit.no_implementations"))
        for impl in implementations:
            check_implementation(impl)
        whole_number("T", length, 2)
        if args.all:
            workers, limit = _number(args.workers, "--workers"), _number(args.limit, "--limit", float)
            if workers is None or workers < 1:
                raise ValueError(tr("audit.cli_bad_workers", got=describe(args.workers)))
            if limit is None or limit <= 0:
                raise ValueError(tr("audit.bad_limit", got=describe(args.limit)))
            def write(verdicts):
                if args.json:  # whole or not at all: a reader never sees half a file
                    with open(args.json + ".part", "w", encoding="utf-8") as out:
                        json.dump(sweep_json(verdicts, limit=limit, workers=workers,
                                             implementations=list(implementations), length=length),
                                  out, indent=1, ensure_ascii=False)
                        out.write("\n")
                    os.replace(args.json + ".part", args.json)

            verdicts = sweep(None, implementations, PADDINGS, length, workers, limit, progress=sys.stderr, done=write)
            write(verdicts)
            print(sweep_table(verdicts))
            print(sweep_summary(verdicts))
            return max((v.exit_status for v in verdicts if v.exit_status == 1), default=0)
        verdict = audit_target(args.target, implementations, PADDINGS, length)
    except (ValueError, TypeError, ImportError) as error:
        print(error, file=sys.stderr)
        return 2
    for line in verdict.note_lines():
        print(line)
    if verdict.rows:
        print(audit_table(verdict.rows))
    if verdict.kind == "ok":
        print(tr("audit.summary_ok", n=len(verdict.rows)))
    else:
        if verdict.kind in ("leak", "differ"):
            print(tr("audit.summary_wrong", n=sum(not row.as_expected for row in verdict.rows)))
        print(verdict_line(verdict), file=sys.stdout)
        if verdict.repro:
            print(tr("audit.repro", repro=verdict.repro))
    if verdict.packing is not None:  # the fourth check: documents packed into one row
        print(tr("audit.packing_line", word=verdict.packing.word(), reason=verdict.packing.reason()))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(verdict.to_dict(), out, indent=1, ensure_ascii=False)
    return verdict.exit_status
