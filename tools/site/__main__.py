"""The command line: ``python -m tools.site build [--lang LANG]`` (the three sites, or these) or
``python -m tools.site serve [--port N]`` (_build/html on http://127.0.0.1:8000/).
``build --once-for RUN`` builds unless the site was already built for the test run RUN
(``make test`` starts it in the background; see ``pipeline.build_once``).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import sys

from .layout import HTML, TITLES
from .pipeline import build, build_once


def serve(port: int) -> None:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(HTML))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        print(f"Serving the course on http://127.0.0.1:{port}/  (Ctrl+C to stop)", flush=True)
        server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.site", description="Build or serve the three language sites.")
    parser.add_argument("command", choices=["build", "serve"])
    parser.add_argument("--lang", action="append", choices=list(TITLES), help="build only these")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--once-for", metavar="RUN", help="build only if not yet built for this test run")
    args = parser.parse_args(argv)
    if args.command == "build" and args.once_for:
        build_once(args.once_for, args.lang or list(TITLES))
    elif args.command == "build":
        build(args.lang or list(TITLES))
    else:
        serve(args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
