"""Where the warehouse and the lake are unless a command or flow names them (relative to the
working directory). A module of its own so that the command line reads them without
importing DuckDB, Arrow and polars."""
from __future__ import annotations

from pathlib import Path

DEFAULT_WAREHOUSE = Path("data/warehouse/aequum.duckdb")
DEFAULT_LAKE = Path("data/lake")
