"""Where the course lives on the web, all from ``_config.yml``'s ``repository`` (set once there):
the repository, a file in it on its branch, and the published site on GitHub Pages.

The site's address follows GitHub Pages' rule for a project site: ``https://github.com/OWNER/NAME`` is
published at ``https://OWNER.github.io/NAME/`` (``https://OWNER.github.io/`` when NAME is
``OWNER.github.io``, a user or organization site). OWNER and NAME are split from the URL as
sphinx-book-theme splits them for the launch buttons (``header_buttons/launch.py``,
``_split_repo_url``; a test keeps the two equal). The workflow's ``pages`` job publishes
``_build/html`` there; the README's "read online" link, the PDFs' links to pages outside the book
and the site's footer use these functions.
"""

from __future__ import annotations

import yaml

from .layout import ROOT


def repository() -> dict:
    """``{"url": ..., "branch": ...}`` of ``_config.yml``."""
    found = yaml.safe_load((ROOT / "_config.yml").read_text("utf-8"))["repository"]
    return {"url": found["url"].rstrip("/"), "branch": found.get("branch") or "main"}


def owner_and_name(url: str) -> tuple[str, str]:
    """``https://github.com/attnlab/causal-attention`` -> ``("attnlab", "causal-attention")``: the part
    after ``github.com/``, split at its first two slashes, as the launch buttons do."""
    if "github.com/" not in url:
        raise ValueError(f"GitHub Pages needs a repository on github.com, not {url}")
    owner, name = url.split("github.com/")[-1].split("/")[:2]
    return owner, name.removesuffix(".git")


def pages_url(url: str | None = None) -> str:
    """The address GitHub Pages publishes the repository's site at, with a trailing slash."""
    owner, name = owner_and_name(url or repository()["url"])
    host = f"{owner.lower()}.github.io"
    return f"https://{host}/" if name.lower() == host else f"https://{host}/{name}/"


def file_url(path: str) -> str:
    """A file of the repository on its branch, as GitHub shows it (LICENSE, CITATION.cff)."""
    found = repository()
    return f"{found['url']}/blob/{found['branch']}/{path}"
