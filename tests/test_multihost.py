"""A real multi-host cluster: scheduler, two workers and the client on four "hosts".

Each host is its own Linux network namespace (tests/netns.py) whose only
link is a veth pair into a private bridge, with its own 10.x address, so
every message between the client, the scheduler and the workers (the
client's direct calls to the workers' block actors among them) is real TCP
over those links. The
scheduler and workers are the ``dask`` command-line programs of this venv
(``python -m distributed.cli.dask_scheduler`` / ``dask_worker``); the client
is a separate process in the fourth namespace that runs ``dmlr.fit`` and
writes the model. The test compares it with an in-process fit.

Skipped, saying why, without root or iproute2 (CI runs it as root).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from netns import NetnsUnavailable, VirtualLan

import dmlr
from dmlr.datasets import make_multilabel

PARAMS = dict(alpha=1.0, alpha_rank=0.01, alpha_nuclear=0.1, max_iter=150, tol=1e-6)
PORT = 8786

#: Run in the client namespace: argv = scheduler address, store, output prefix, params JSON.
CLIENT = r"""
import json, os, sys
import numpy as np
from distributed import Client
import dmlr

addr, store, out, params = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
netns = lambda: os.readlink("/proc/self/ns/net")
with Client(addr, timeout="60s", set_as_default=False) as client:
    client.wait_for_workers(2, timeout=60)
    info = client.scheduler_info()
    workers = dmlr.distributed.client.cluster_workers(client)  # the cached info may list none
    with dmlr.config_context(backend="dask"):
        model = dmlr.fit(store, "rbrl", client=client, **params)
    # the python environment and dmlr each process runs
    venv = lambda: [sys.prefix, dmlr.__file__]
    venvs = dict(client=venv(), scheduler=client.run_on_scheduler(venv), workers=client.run(venv))
    # tasks each worker ran (its row block among them), and the peers it fetched data from
    executed = client.run(lambda dask_worker: dask_worker.state.executed_count)
    fetched = client.run(lambda dask_worker: sorted({str(r.get("who")) for r in dask_worker.transfer_incoming_log}))
    report = dict(
        scheduler=client.scheduler.address,
        scheduler_info_address=info["address"],
        workers=sorted(workers),
        worker_nthreads={a: w["nthreads"] for a, w in workers.items()},
        venvs=venvs,
        executed=executed,
        fetched_from=fetched,
        netns=dict(client=netns(), scheduler=client.run_on_scheduler(netns), workers=client.run(netns)),
        backend=model.backend_, n_iter=int(model.n_iter_),
    )
np.savez(out + ".npz", coef=model.coef_, history=np.asarray(model.objective_history_))
with open(out + ".json", "w") as f:
    json.dump(report, f)
"""


@pytest.fixture
def lan():
    try:
        net = VirtualLan.create(["scheduler", "worker-a", "worker-b", "client"], tag="mh")
    except NetnsUnavailable as e:
        pytest.skip(f"multi-host test needs Linux network namespaces: {e}")
    try:
        yield net
    finally:
        net.close()


def _logs(tmp_path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(tmp_path.glob("*.log")))


def test_fit_over_scheduler_and_two_workers_on_separate_hosts(lan, tmp_path):
    store = make_multilabel(
        tmp_path / "small.zarr",
        n_samples=900,
        n_features=12,
        n_labels=7,
        cardinality=2.0,
        chunk_rows=64,
        dtype="float64",
        seed=3,
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env["PYTHONUNBUFFERED"] = "1"
    py = sys.executable  # the test venv's python: the workers import this dmlr
    sched = lan.hosts["scheduler"].ip
    addr = f"tcp://{sched}:{PORT}"
    procs = {
        "scheduler": lan.popen(
            "scheduler",
            [py, "-m", "distributed.cli.dask_scheduler", "--host", sched, "--port", PORT, "--no-dashboard"],
            log=tmp_path / "scheduler.log",
            env=env,
            cwd=tmp_path,
        )
    }
    for role in ("worker-a", "worker-b"):
        procs[role] = lan.popen(
            role,
            [
                py,
                "-m",
                "distributed.cli.dask_worker",
                addr,
                "--host",
                lan.hosts[role].ip,
                "--nthreads",
                1,
                "--nworkers",
                1,
                "--no-dashboard",
                "--local-directory",
                tmp_path / role,
            ],
            log=tmp_path / f"{role}.log",
            env=env,
            cwd=tmp_path,
        )

    # the reference, in this process, while the cluster starts
    with dmlr.config_context(backend="local"):
        local = dmlr.fit(store, "rbrl", **PARAMS)
    assert local.backend_ == "local"

    out = tmp_path / "remote"
    try:
        r = subprocess.run(
            lan.argv("client", [py, "-c", CLIENT, addr, store, out, json.dumps(PARAMS)]),
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"client timed out\n{_logs(tmp_path)}")
    for role, p in procs.items():
        assert p.poll() is None, f"{role} exited with {p.returncode}\n{_logs(tmp_path)}"
    assert r.returncode == 0, f"client failed:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}\n{_logs(tmp_path)}"
    rep = json.loads(out.with_suffix(".json").read_text())
    res = np.load(out.with_suffix(".npz"))

    # -- the cluster really is four hosts talking TCP over the virtual LAN --------
    worker_ips = {lan.hosts["worker-a"].ip, lan.hosts["worker-b"].ip}
    assert rep["scheduler"] == addr and rep["scheduler_info_address"] == addr
    assert len(rep["workers"]) == 2
    assert {w.split("://")[1].rsplit(":", 1)[0] for w in rep["workers"]} == worker_ips
    assert all(w.startswith("tcp://") for w in rep["workers"])
    assert set(rep["worker_nthreads"].values()) == {1}
    spaces = [rep["netns"]["client"], rep["netns"]["scheduler"], *rep["netns"]["workers"].values()]
    here = os.readlink("/proc/self/ns/net")
    assert len(set(spaces)) == 4 and here not in spaces, rep["netns"]
    # every process runs this venv's python and dmlr
    here_env = [sys.prefix, dmlr.__file__]
    assert rep["venvs"]["client"] == here_env and rep["venvs"]["scheduler"] == here_env, rep["venvs"]
    assert list(rep["venvs"]["workers"].values()) == [here_env, here_env], rep["venvs"]
    # both workers computed (each holds row blocks); any data one fetched came from the other
    assert set(rep["executed"]) == set(rep["workers"]) and min(rep["executed"].values()) > 0, rep["executed"]
    for w, peers in rep["fetched_from"].items():
        assert set(peers) <= set(rep["workers"]) - {w}, (w, peers)

    # -- and gives the in-process model -------------------------------------------
    assert rep["backend"] == "dask"
    assert rep["n_iter"] == local.n_iter_
    coef, hist = res["coef"], res["history"]
    assert coef.shape == local.coef_.shape
    rel = np.linalg.norm(coef - local.coef_) / np.linalg.norm(local.coef_)
    assert rel <= 1e-10, f"coef_ differs by {rel:.3g} (relative)"
    assert len(hist) == len(local.objective_history_)
    np.testing.assert_allclose(hist, local.objective_history_, rtol=1e-10, atol=0)
