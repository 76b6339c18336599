"""The state broadcast of ``flows.engine_tasks.run_engine_pieces``: the worker task that prepared
an engine's state scatters it from that worker, where Dask keeps the task's own object under the
key (no second copy: the state of pricing at 10M HMDA records is 0.65 GB), and the other workers
receive copies."""
from __future__ import annotations

import numpy as np


def _prepare_and_scatter():
    from distributed import get_worker, worker_client

    state = {"fields": {"rate": np.arange(1000, dtype=np.float64)}, "codes": np.arange(1000, dtype=np.int8)}
    with worker_client() as client:
        [future] = client.scatter([state], broadcast=True, hash=False)  # as run_pieces does
        own = get_worker().data[future.key] is state
        holders = client.who_has([future])[future.key]
        seen = client.gather(client.submit(lambda st: float(st["fields"]["rate"].sum()), future, pure=False))
    return own, len(holders), seen


def test_the_preparing_worker_keeps_its_own_state_under_the_broadcast_key():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        own, holders, seen = client.submit(_prepare_and_scatter, pure=False).result()
    assert own  # the task's own object: the worker holds the state once
    assert holders == 2 and seen == float(np.arange(1000).sum())
