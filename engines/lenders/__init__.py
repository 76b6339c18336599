"""Per-lender and per-market controlled disparities against peers (engine ``lenders``)."""
