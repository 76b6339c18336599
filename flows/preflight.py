"""The checks of a run that need neither Prefect nor Dask, made before either starts (a bad
spec or source is then one line and exit 2 within a second, not after the cluster is up)."""
from __future__ import annotations

from pathlib import Path

from aequum.engines.core.spec import AuditSpec, SpecError, load_spec
from aequum.engines.registry import ENGINES


def preflight(spec_path: str | Path, engines: list[str] | None = None) -> AuditSpec:
    """Everything about a run that can be checked before Prefect and Dask start: the spec
    (engine names and parameters included), that the source opens and has the spec's columns,
    and that the model file loads. Raises the user error naming the field, file or column."""
    from aequum.engines.core.validation import check_columns
    from aequum.flows.readers import open_source

    spec_file = Path(spec_path).resolve()
    spec = load_spec(spec_file)
    unknown = [n for n in engines or [] if n not in ENGINES]
    if unknown:
        raise SpecError(f"--engines: unknown engine(s) {unknown}; known: {sorted(ENGINES)}")
    if engines == []:
        raise SpecError("--engines: name at least one engine")
    with open_source(spec.source, spec_file.parent, batch_rows=1_000, columns=spec.columns()) as stream:
        check_columns(stream.columns, spec)
    check_group_sizes(spec, spec_file.parent, engines or spec.engines.run)
    if spec.model is not None and spec.model.kind != "surrogate":
        from aequum.engines.core.models import build_model

        build_model(spec.model, base_dir=spec_file.parent)
    return spec


def check_group_sizes(spec: AuditSpec, spec_dir: Path, names: list[str]) -> None:
    """Engines whose parameters need groups of some size (``min_group_sizes``, e.g. CST's k)
    are checked against the source's groups, counted from its protected columns only until
    every group is large enough (one batch of a large source)."""
    from aequum.engines.core.validation import group_sizes
    from aequum.flows.readers import open_source

    needs = {n: spec.engines.params(n).min_group_sizes(spec) for n in names
             if hasattr(spec.engines.params(n), "min_group_sizes")}
    if not needs:
        return
    wanted: dict[str, tuple[int, int]] = {}
    for need in needs.values():
        for unit, (p, r) in need.items():
            wanted[unit] = (max(p, wanted.get(unit, (0, 0))[0]), max(r, wanted.get(unit, (0, 0))[1]))
    units = [unit.split("&") for unit in wanted]
    with open_source(spec.source, spec_dir, batch_rows=200_000,
                     columns=[p.column for p in spec.protected]) as stream:
        sizes = group_sizes(stream.batches, spec, units, wanted)
    for name, need in needs.items():
        for unit, (p_need, r_need) in need.items():
            have_p, have_r = sizes[unit]
            for group, have, want in (("protected", have_p, p_need), ("reference", have_r, r_need)):
                if have < want:
                    field = getattr(spec.engines.params(name), "group_size_field", "")
                    raise SpecError(f"engines.{name}{'.' + field if field else ''} needs at least {want:,} "
                                    f"members in the {group} group of {unit!r}; the source has {have:,}")
