"""Presentation of a run for people: the HTML page, its plots and one section per engine.

Nothing here computes an audit figure; sections read the warehouse through ``Run`` (bounded
queries from ``sql/report/``) and draw what the engines wrote."""
