"""deploy/'s images, built and run: a Dask cluster of containers fitting from a shared Zarr store.

Builds deploy/Dockerfile (scheduler/worker) and deploy/Dockerfile.notebook
(client) with podman, on a local Debian base in place of the official Dask
images (no registry is reachable here; tests/containers.py). Then, on a
private podman network: a scheduler and two worker containers of the worker
image, a volume for the Zarr stores, and a client container of the notebook
image (tests/image_client.py) that converts a small set into the volume and
fits from it, once plainly and once while the test SIGKILLs a worker's
container in the middle of the fit.

Everything the containers get from the deployment comes from
deploy/values.yaml, as the Helm chart would pass it: image names and tags,
environment, the data volume's and the Numba cache's mounts (read-only for
the workers), the scheduler port, worker threads and memory limit. What is
checked: the models equal the in-process fit, ``get_versions(check=True)``
passes, every process runs as the values' non-root uid, the Numba cache is
written, the workers see ``OMP_NUM_THREADS=1`` and dmlr's malloc setting, the
killed worker's blocks are computed again from the store, and the host's CA
bundle, mounted for the build, is in no image.

Skipped, saying why, only where containers cannot run at all (no podman, no
base image and no mmdebstrap to build one, or podman fails to run ``true``);
.ci/run installs podman, runc and mmdebstrap where apt-get works.
"""

from __future__ import annotations

import json
import time

import containers
import pytest
import yaml
from containers import ContainersUnavailable, Resources
from test_deploy import DEPLOY, DOCKERFILES, ROOT, env_list

pytestmark = pytest.mark.slow

CLIENT = ROOT / "tests" / "image_client.py"
CLIENT_IN_CONTAINER = "/opt/dmlr-test/image_client.py"
N_WORKERS = 2
TOLERANCE = 1e-10


def image_ref(section_values) -> str:
    return f"{section_values['image']['repository']}:{section_values['image']['tag']}"


def env_options(section_values) -> list[str]:
    """``-e NAME=value`` for the section's env entries with a literal value."""
    env = env_list(section_values.get("env") or [])
    return [a for name, e in env.items() if "value" in e for a in ("-e", f"{name}={e['value']}")]


def mount_options(section_values, claims: dict) -> list[str]:
    """``-v`` options for the section's volumeMounts: a claim is the run's podman volume for it
    (``claims``), an emptyDir a fresh anonymous volume; readOnly as the values say."""
    mounts = section_values.get("mounts") or {}
    volumes = {v["name"]: v for v in mounts.get("volumes", [])}
    options = []
    for m in mounts.get("volumeMounts", []):
        volume = volumes[m["name"]]
        if "persistentVolumeClaim" in volume:
            pvc = volume["persistentVolumeClaim"]
            read_only = m.get("readOnly") or pvc.get("readOnly")
            options += ["-v", f"{claims[pvc['claimName']]}:{m['mountPath']}" + (":ro" if read_only else "")]
        elif "emptyDir" in volume:
            options += ["-v", m["mountPath"]]
        else:
            raise ValueError(f"volume {m['name']}: only persistentVolumeClaim and emptyDir are emulated")
    return options


def data_mount(section_values) -> str:
    mounts = section_values["mounts"]
    claims = {v["name"] for v in mounts["volumes"] if "persistentVolumeClaim" in v}
    (path,) = [m["mountPath"] for m in mounts["volumeMounts"] if m["name"] in claims]
    return path


def _mib(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:.0f} MiB"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Build the images, start the cluster, run the client; yield what it reported."""
    values = yaml.safe_load((DEPLOY / "values.yaml").read_text())
    workdir = tmp_path_factory.mktemp("images")
    try:
        podman = containers.find_podman(workdir)
        base, base_seconds = containers.base_image(podman, workdir)
        containers.probe(podman, base)
    except ContainersUnavailable as e:
        pytest.skip(str(e))
    summary = containers.SUMMARY
    summary.append(
        f"base image {base}: "
        + (f"built in {base_seconds:.0f} s" if base_seconds else "cached")
        + f", {_mib(podman.image_size(base))}"
    )
    containers.remove_stale(podman)
    res = Resources(podman, containers.run_id())
    try:
        images = {}
        for kind, section, args in (
            ("dask", "worker", {"BASE_IMAGE": base}),
            ("notebook", "jupyter", {"BASE_IMAGE": base, "BUILDER_IMAGE": base}),
        ):
            tag = image_ref(values[section])
            images[kind], seconds = res.build(ROOT, DOCKERFILES[kind], tag, args, workdir)
            summary.append(f"{tag}: built in {seconds:.0f} s, {_mib(podman.image_size(images[kind]))}")
        assert image_ref(values["scheduler"]) == image_ref(values["worker"])

        start = time.monotonic()
        net = ["--network", res.network("net")]
        # the chart's PersistentVolumeClaims -> one podman volume each, writable by the
        # client's fsGroup as Kubernetes makes it (group-owned, group-writable, setgid)
        claims = {
            v["persistentVolumeClaim"]["claimName"]
            for s in ("worker", "jupyter")
            for v in values[s]["mounts"]["volumes"]
            if "persistentVolumeClaim" in v
        }
        claims = {claim: res.volume(claim) for claim in sorted(claims)}
        fs_group = values["jupyter"]["securityContext"]["fsGroup"]
        for volume in claims.values():
            podman.run(
                "run",
                "--rm",
                "--pull=never",
                "--network=none",
                "--user",
                "0",
                "-v",
                f"{volume}:/v",
                base,
                "sh",
                "-c",
                f"chgrp {fs_group} /v && chmod 2775 /v",
                timeout=120,
            )

        port = values["scheduler"]["servicePort"]
        scheduler = res.start(
            "scheduler",
            images["dask"],
            "dask",
            "scheduler",
            "--port",
            port,
            options=[*net, *env_options(values["scheduler"])],
        )
        address = f"tcp://{scheduler}:{port}"
        worker = values["worker"]
        workers = [
            res.start(
                f"worker-{i}",
                images["dask"],
                "dask",
                "worker",
                address,
                "--name",
                res.name(f"worker-{i}"),
                "--nthreads",
                worker["threads_per_worker"],
                "--memory-limit",
                worker["resources"]["limits"]["memory"],
                options=[*net, *env_options(worker), *mount_options(worker, claims)],
            )
            for i in range(N_WORKERS)
        ]
        killed = {}

        def answer(line):
            if line.startswith("@@KILL "):
                name = line.split(None, 1)[1]
                assert name in workers, f"the client asked to kill {name!r}, not one of {workers}"
                res.podman.run("kill", "--signal", "KILL", name, timeout=60)
                res.podman.run("wait", name, timeout=60)
                killed.update(name=name, **res.state(name))
                return f"killed {name}"
            return None

        jupyter = values["jupyter"]
        data = data_mount(jupyter)
        client = res.name("client")
        res.containers.append(client)
        code, lines, stderr = containers.converse(
            podman,
            [
                "run",
                "-i",
                "--rm",
                "--pull=never",
                "--name",
                client,
                *net,
                *env_options(jupyter),
                "-e",
                f"DASK_SCHEDULER_ADDRESS={address}",
                *mount_options(jupyter, claims),
                "-v",
                f"{CLIENT}:{CLIENT_IN_CONTAINER}:ro",
                images["notebook"],
                "python",
                "-u",
                CLIENT_IN_CONTAINER,
                data,
            ],
            answer,
            timeout=600,
        )
        seconds = time.monotonic() - start
        reports = [json.loads(line.split(None, 1)[1]) for line in lines if line.startswith("@@REPORT ")]
        if code != 0 or len(reports) != 1:
            logs = "\n".join(f"--- {c}\n{res.logs(c)}" for c in [scheduler, *workers])
            pytest.fail(
                f"the client exited {code} without one report:\n{''.join(lines[-30:])}\n{stderr[-6000:]}\n{logs}"
            )
        client_seconds = ", ".join(f"{k} {v:.0f} s" for k, v in reports[0]["seconds"].items())
        summary.append(f"cluster + client: {seconds:.0f} s (the client's {client_seconds})")
        yield dict(
            values=values,
            report=reports[0],
            killed=killed,
            images=images,
            base=base,
            podman=podman,
            workers=workers,
            data=data,
        )
    finally:
        errors = res.close()
    assert not errors, f"cleanup failed: {errors}"


def test_cluster_of_containers_fits_the_in_process_model(run):
    values, report = run["values"], run["report"]
    fit = report["fit"]
    assert "error" not in fit, fit.get("error")
    summary = containers.SUMMARY
    summary.append(
        f"fit on {report['store']['path']} (rows {report['store']['rows']}): backend "
        f"{fit['backend']}, {fit['n_iter']} iterations, coef_ relative difference to the in-process "
        f"fit {fit['coef_rel_diff']:.2e}, objective {fit['objective_max_rel_diff']:.2e}"
    )
    assert fit["backend"] == "dask"
    assert fit["n_iter"] == fit["reference_n_iter"]
    assert fit["coef_rel_diff"] <= TOLERANCE
    assert fit["objective_max_rel_diff"] is not None and fit["objective_max_rel_diff"] <= TOLERANCE

    # client, scheduler and workers: one Python, one dask/distributed/numpy/... and dmlr
    assert fit["versions_error"] is None, fit["versions_error"]
    assert len(set(fit["python"].values())) == 1 and len(fit["python"]) == 2 + N_WORKERS, fit["python"]
    assert sorted(fit["workers"]) == sorted(run["workers"])

    # every process as the values' non-root uid (the images' USER)
    uids = {
        "client": fit["client"]["uid"],
        "scheduler": fit["scheduler"]["uid"],
        **{w: f["uid"] for w, f in fit["workers"].items()},
    }
    summary.append(f"uids: {uids}; python {sorted(set(fit['python'].values()))}, dmlr {fit['dmlr']}")
    assert fit["client"]["uid"] == values["jupyter"]["securityContext"]["runAsUser"] != 0
    assert fit["scheduler"]["uid"] == values["scheduler"]["securityContext"]["runAsUser"] != 0
    worker_env = env_list(values["worker"]["env"])
    for name, facts in fit["workers"].items():
        assert facts["uid"] == values["worker"]["securityContext"]["runAsUser"] != 0, name
        # the values' environment, and the malloc setting dmlr's own clusters give their workers
        for key, entry in worker_env.items():
            assert facts["env"].get(key) == entry["value"], (name, key, facts["env"])
        assert facts["env"]["OMP_NUM_THREADS"] == "1"
        for key, value in fit["expected_worker_environ"].items():
            assert facts["env"].get(key) == value, (name, key, facts["env"])
        assert facts["env"].get("MALLOC_TRIM_THRESHOLD_"), "the nanny's malloc trim setting is missing"
        # the kernels were compiled into the cache dir, by the worker's uid
        cache = facts["numba_cache"]
        assert cache["dir"] == worker_env["NUMBA_CACHE_DIR"]["value"] and cache["writable"], cache
        assert cache["index_files"] > 0 and cache["data_files"] > 0, f"{name}: nothing in the Numba cache {cache}"
        assert cache["owners"] == [facts["uid"]], cache
        # the data volume is read-only on the workers
        assert facts["data_writable"] is False, name
    assert fit["client"]["data_writable"] is True
    assert fit["client"]["numba_cache"]["index_files"] > 0
    shown = ("OMP_NUM_THREADS", "NUMBA_CACHE_DIR", "MALLOC_TRIM_THRESHOLD_", *fit["expected_worker_environ"])
    env = next(iter(fit["workers"].values()))["env"]
    summary.append(
        "workers' env: "
        + json.dumps({k: env.get(k) for k in shown})
        + "; Numba cache files per worker: "
        + str({w: f["numba_cache"]["index_files"] + f["numba_cache"]["data_files"] for w, f in fit["workers"].items()})
    )


def test_fit_survives_a_killed_worker_container(run):
    report, killed = run["report"], run["killed"]
    fault = report.get("fault")
    assert fault is not None, "the fault phase did not run (the first fit failed)"
    assert "error" not in fault, fault.get("error")
    # the victim's container died of SIGKILL mid-fit and left the cluster
    assert killed and killed["exit_code"] == 137 and killed["status"] == "exited", killed
    assert fault["killed"]["worker"] == killed["name"]
    assert fault["killed"]["answer"] == f"killed {killed['name']}"
    assert fault["block_calls"] > fault["kill_at"], "the kill did not come in the middle of the fit"
    assert fault["workers_left"] == sorted(set(run["workers"]) - {killed["name"]})
    # the blocks only it held were computed again, from the Zarr store on the volume
    lost = fault["killed"]["blocks"]
    assert lost, fault["killed"]
    counts = fault["block_computations"]
    assert all(counts.get(k, 0) >= 2 for k in lost), f"lost blocks {lost} were not recomputed: {counts}"
    # and the fit ends at the model of the in-process fit
    assert fault["backend"] == "dask" and fault["n_iter"] == fault["reference_n_iter"]
    assert fault["coef_rel_diff"] <= TOLERANCE and fault["objective_max_rel_diff"] <= TOLERANCE
    containers.SUMMARY.append(
        f"fault: {killed['name']} SIGKILLed at map-reduce call {fault['kill_at']} of {fault['block_calls']} "
        f"(exit {killed['exit_code']}); its blocks computed {[counts[k] for k in lost]} times; "
        f"coef_ relative difference {fault['coef_rel_diff']:.2e}, objective {fault['objective_max_rel_diff']:.2e}"
    )


def test_build_puts_no_host_ca_bundle_in_the_images(run):
    """The bundle mounted for pip at build time is not in any layer: the images keep the base's."""
    podman, bundle = run["podman"], str(containers.CA_BUNDLE)

    def digest(image):
        proc = podman.run(
            "run", "--rm", "--pull=never", "--network=none", "--user", "0", image, "sha256sum", bundle, timeout=120
        )
        return proc.stdout.split()[0]

    base = digest(run["base"])
    assert {kind: digest(image) for kind, image in run["images"].items()} == {k: base for k in run["images"]}
