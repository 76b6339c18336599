"""The code version recorded with every run: package version plus git commit when known."""
from __future__ import annotations

import subprocess
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


@lru_cache(maxsize=1)
def code_version() -> str:
    try:
        pkg = version("aequum")
    except PackageNotFoundError:
        pkg = "unknown"
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=12"],
                             capture_output=True, text=True, timeout=5, check=False)
        commit = out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return f"{pkg}+{commit}" if commit else pkg
