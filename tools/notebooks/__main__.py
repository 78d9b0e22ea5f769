"""The command line: ``python -m tools.notebooks build|render|check|refresh [SOURCE ...]``.

See the package docstring (tools/notebooks/__init__.py) for what each command does.
"""

from __future__ import annotations

import argparse
import sys

from tools import notebooks

from .checks import check
from .execution import execute, refresh
from .exercises import is_stub
from .files import render
from .source_format import ROOT
from .sources import find_sources


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.notebooks", description=notebooks.__doc__.split("\n")[0])
    parser.add_argument("command", choices=["build", "render", "check", "refresh"])
    parser.add_argument("sources", nargs="*", help="source files (default: all)")
    args = parser.parse_args(argv)
    if args.command == "check":
        problems = check()
        print("\n".join(problems) or "notebooks are up to date")
        return 1 if problems else 0
    if args.command == "refresh":
        for source in find_sources(args.sources):
            for path in refresh(source):
                print(f"refreshed {path.relative_to(ROOT)}")
        return 0
    for source in find_sources(args.sources):
        for path in render(source):
            if args.command == "build" and path.suffix == ".ipynb" and not is_stub(path):
                print(f"executing {path.relative_to(ROOT)}", flush=True)
                execute(path)
            else:
                print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
