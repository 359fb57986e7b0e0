"""deploy/: the images, the Helm values and the DaskCluster agree with each other and
with pyproject.toml, use keys the Dask Helm chart and the dask-kubernetes operator
read, and the Dockerfiles' builder stage builds the wheel their final stage installs.

No network and no Docker engine needed, except that the wheel build may fetch
setuptools/wheel from PyPI when they are not installed here (as ``docker build`` does).
"""

from __future__ import annotations

import configparser
import fnmatch
import importlib.metadata
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import dask.config
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
DOCKERFILES = {"dask": DEPLOY / "Dockerfile", "notebook": DEPLOY / "Dockerfile.notebook"}
FINAL_BASE = {"dask": "ghcr.io/dask/dask", "notebook": "ghcr.io/dask/dask-notebook"}

# Keys of the dask/dask chart, from dask/helm-chart dask/values.yaml @ e581ea8 (appVersion
# 2023.10.1) and the templates dask-{scheduler,worker,jupyter}-deployment.yaml that read
# them (scheduler.env is read by the scheduler template without a default in values.yaml).
CHART_KEYS = {
    "": {"nameOverride", "fullnameOverride", "scheduler", "webUI", "worker", "additional_worker_groups", "jupyter"},
    "scheduler": {
        "name",
        "enabled",
        "image",
        "replicas",
        "serviceType",
        "loadBalancerIP",
        "servicePort",
        "serviceAnnotations",
        "extraArgs",
        "resources",
        "tolerations",
        "affinity",
        "nodeSelector",
        "securityContext",
        "serviceAccountName",
        "metrics",
        "livenessProbe",
        "readinessProbe",
        "env",
    },
    "worker": {
        "name",
        "image",
        "replicas",
        "strategy",
        "custom_scheduler_url",
        "default_resources",
        "env",
        "extraArgs",
        "resources",
        "mounts",
        "annotations",
        "tolerations",
        "affinity",
        "nodeSelector",
        "securityContext",
        "serviceAccountName",
        "port",
        "portDashboard",
        "threads_per_worker",
        "metrics",
        "livenessProbe",
        "readinessProbe",
    },
    "jupyter": {
        "name",
        "enabled",
        "rbac",
        "image",
        "serviceType",
        "servicePort",
        "password",
        "passwordHint",
        "env",
        "command",
        "args",
        "extraConfig",
        "resources",
        "mounts",
        "tolerations",
        "affinity",
        "nodeSelector",
        "securityContext",
        "serviceAccountName",
        "ingress",
        "livenessProbe",
        "readinessProbe",
    },
    "image": {"repository", "tag", "pullPolicy", "pullSecrets", "dask_worker"},
    "mounts": {"volumes", "volumeMounts"},
}


# --------------------------------------------------------------------------- helpers


@dataclass
class Stage:
    base: str  # the image, build arguments substituted
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)
    base_written: str = ""  # as written after FROM, e.g. ${BASE_IMAGE}

    def all(self, keyword):
        return [args for kw, args in self.instructions if kw == keyword]


def parse_dockerfile(path: Path, build_args: dict | None = None) -> list[Stage]:
    """Stages of a Dockerfile: FROM image, AS name, (KEYWORD, arguments) in order.

    Joins backslash continuations and drops comment lines, as Docker does.
    ``ARG NAME=default`` lines before the first FROM declare the variables a
    FROM may use (``${NAME}`` or ``$NAME``); ``build_args`` overrides their
    defaults, as ``--build-arg`` does.
    """
    logical, buf = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        logical.append(buf + line)
        buf = ""
    assert not buf, f"{path.name}: dangling line continuation"
    stages: list[Stage] = []
    global_args: dict[str, str | None] = {}

    def substitute(m):
        name = m.group(1) or m.group(2)
        assert name in global_args, f"{path.name}: FROM uses ${name}, not declared by an ARG before the first FROM"
        value = (build_args or {}).get(name, global_args[name])
        assert value, f"{path.name}: build argument {name} has no default"
        return value

    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword, args = keyword.upper(), args.strip()
        if keyword == "ARG" and not stages:
            name, sep, default = args.partition("=")
            global_args[name] = default if sep else None
        elif keyword == "FROM":
            m = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", args, re.IGNORECASE)
            assert m, f"{path.name}: cannot parse FROM {args!r}"
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", substitute, m.group(1))
            stages.append(Stage(base, m.group(2), base_written=m.group(1)))
        else:
            assert stages, f"{path.name}: {keyword} before FROM"
            stages[-1].instructions.append((keyword, args))
    return stages


def split_image(ref: str) -> tuple[str, str]:
    repo, sep, tag = ref.rpartition(":")
    assert sep and "/" not in tag, f"image {ref!r} has no tag"
    return repo, tag


def copy_parts(args: str) -> tuple[dict[str, str], list[str], str]:
    words = shlex.split(args)
    flags = dict(w[2:].split("=", 1) for w in words if w.startswith("--"))
    paths = [w for w in words if not w.startswith("--")]
    return flags, paths[:-1], paths[-1]


def env_of(stage: Stage) -> dict[str, str]:
    env = {}
    for args in stage.all("ENV"):
        for word in shlex.split(args):
            key, sep, value = word.partition("=")
            assert sep, f"ENV {args!r}: use KEY=VALUE"
            env[key] = value
    return env


def env_list(entries) -> dict:
    """Kubernetes env list -> {name: entry}; names must be unique."""
    names = [e["name"] for e in entries]
    assert len(names) == len(set(names)), f"duplicate env names in {names}"
    return {e["name"]: e for e in entries}


def load_yaml(name):
    with open(DEPLOY / name) as f:
        return yaml.safe_load(f)


def pyproject():
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def lock_pins() -> dict[str, tuple[str, str]]:
    pins = {}
    for line in (DEPLOY / "requirements.lock").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][^\s;]*)", line)
        assert m, f"requirements.lock: {line!r} is not an exact pin NAME==VERSION"
        key = canonicalize_name(m.group(1))
        assert key not in pins, f"requirements.lock pins {m.group(1)} twice"
        pins[key] = (m.group(1), m.group(2))
    return pins


def dask_tag() -> str:
    """The one Dask image tag of the Dockerfiles (checked equal in a test)."""
    return split_image(parse_dockerfile(DOCKERFILES["dask"])[-1].base)[1]


def our_image_tag() -> str:
    return f"{pyproject()['project']['version']}-dask{dask_tag()}"


def dockerfile_uid(kind: str) -> int:
    users = parse_dockerfile(DOCKERFILES[kind])[-1].all("USER")
    assert users, f"{DOCKERFILES[kind].name}: the final stage sets no USER"
    user = users[-1].split(":")[0]
    assert user.isdigit(), f"{DOCKERFILES[kind].name}: USER {users[-1]!r} is not numeric"
    return int(user)


# --------------------------------------------------------------------------- Dockerfiles


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_dockerfile_builds_wheel_then_installs_it_pinned(kind):
    path = DOCKERFILES[kind]
    stages = parse_dockerfile(path)
    assert len(stages) == 2, f"{path.name}: expected a builder and a final stage"
    builder, final = stages
    assert builder.name, f"{path.name}: the builder stage needs a name (FROM ... AS name)"
    assert final.name is None or final.name != builder.name
    assert split_image(final.base)[0] == FINAL_BASE[kind]
    assert split_image(builder.base)[0] in FINAL_BASE.values()

    # the builder writes the wheel into -w DIR ...
    wheel_cmds = [r for r in builder.all("RUN") if re.search(r"\bpip wheel\b", r)]
    assert len(wheel_cmds) == 1, f"{path.name}: builder must run `pip wheel` once"
    words = shlex.split(wheel_cmds[0])
    assert "--no-deps" in words, "the wheel must be dmlr alone; dependencies come from the lock"
    wheel_dir = posixpath.normpath(words[words.index("-w") + 1])

    # ... the final stage copies exactly that folder ...
    copies = [copy_parts(a) for a in final.all("COPY")]
    from_builder = [(srcs, dst) for flags, srcs, dst in copies if flags.get("from") == builder.name]
    assert len(from_builder) == 1, f"{path.name}: copy the wheel from the builder stage once"
    ((srcs, dst),) = from_builder
    assert [posixpath.normpath(s) for s in srcs] == [wheel_dir], (
        f"{path.name}: final stage copies {srcs} but the builder writes {wheel_dir}"
    )

    # ... and installs the dmlr wheel from it, constrained by the copied lock file.
    lock_dst = [d for flags, s, d in copies if "from" not in flags and s == ["deploy/requirements.lock"]]
    assert len(lock_dst) == 1, f"{path.name}: deploy/requirements.lock must be copied in"
    installs = [r for r in final.all("RUN") if re.search(r"\bpip install\b", r)]
    assert len(installs) == 1, f"{path.name}: one pip install in the final stage"
    words = shlex.split(installs[0].split("&&")[0])
    wheel_args = [w for w in words if w.endswith(".whl")]
    assert wheel_args == [posixpath.join(dst.rstrip("/"), "dmlr-*.whl")], (
        f"{path.name}: installs {wheel_args}, expected the dmlr wheel from {dst}"
    )
    assert words[words.index("-c") + 1] == lock_dst[0], "install must be constrained by the lock"
    assert "pip check" in installs[0], f"{path.name}: check the installed requirements"


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_dockerfile_base_is_a_build_argument_defaulting_to_the_official_image(kind):
    """Where the official images cannot be pulled, ``--build-arg BASE_IMAGE=...`` (and, for the
    notebook, ``BUILDER_IMAGE``) builds on another base, as tests/test_images.py does."""
    path = DOCKERFILES[kind]
    stages = parse_dockerfile(path)
    assert stages[-1].base_written == "${BASE_IMAGE}", f"{path.name}: final stage FROM {stages[-1].base_written}"
    assert all(re.fullmatch(r"\$\{\w+\}", s.base_written) for s in stages), (
        f"{path.name}: every FROM should be a build argument: {[s.base_written for s in stages]}"
    )
    assert split_image(stages[-1].base)[0] == FINAL_BASE[kind]  # the default
    local = "localhost/dmlr-base:test"
    rebased = parse_dockerfile(path, {"BASE_IMAGE": local, "BUILDER_IMAGE": local})
    assert {s.base for s in rebased} == {local}


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_dockerfile_copies_only_existing_files_the_dockerignore_keeps(kind):
    path = DOCKERFILES[kind]
    ignore = Path(f"{path}.dockerignore").read_text().splitlines()
    kept = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert "*" in ignore, f"{path.name}.dockerignore should exclude everything by default"
    for stage in parse_dockerfile(path):
        for flags, srcs, _ in map(copy_parts, stage.all("COPY")):
            if "from" in flags:
                continue
            for src in srcs:
                assert (ROOT / src).exists(), f"{path.name}: COPY {src} does not exist"
                assert src.rstrip("/") in kept, f"{path.name}: COPY {src} is excluded by the dockerignore"


def test_dockerfiles_share_one_dask_tag_matching_the_lock():
    tags = {(kind, s.base): split_image(s.base)[1] for kind, p in DOCKERFILES.items() for s in parse_dockerfile(p)}
    assert len(set(tags.values())) == 1, f"FROM tags differ: {tags}"
    tag = dask_tag()
    pins = lock_pins()
    dask_v, dist_v = pins["dask"][1], pins["distributed"][1]
    assert dask_v == dist_v, f"lock pins dask {dask_v} but distributed {dist_v}"
    m = re.fullmatch(rf"{re.escape(dask_v)}(?:-py(\d+\.\d+))?", tag)
    assert m, f"image tag {tag} is not Dask {dask_v}"
    if m.group(1):  # the lock's markers were evaluated for the image's Python
        header = re.search(r"\(Python (\d+\.\d+)\)", (DEPLOY / "requirements.lock").read_text())
        assert header and header.group(1) == m.group(1), (
            f"requirements.lock was generated for Python {header and header.group(1)}, images run {m.group(1)}"
        )
    for kind, path in DOCKERFILES.items():
        asserted = re.findall(r"assert v == \('([^']+)', '([^']+)'\)", path.read_text())
        assert asserted == [(dask_v, dist_v)], f"{path.name}: build-time version check {asserted}"


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_dockerfile_runs_as_non_root_with_thread_and_cache_settings(kind):
    final = parse_dockerfile(DOCKERFILES[kind])[-1]
    uid = dockerfile_uid(kind)
    assert uid != 0, f"{DOCKERFILES[kind].name}: the image would run as root"
    env = env_of(final)
    assert env.get("OMP_NUM_THREADS") == "1"
    if kind == "dask":  # the scheduler/worker image: the workers' malloc settings, given as dmlr's
        # local clusters give them, through the nanny's pre-spawn environment (which it writes
        # over the environment a worker is spawned with), as Dask reads it from this variable
        from dmlr.distributed.client import WORKER_ENVIRON

        name = "DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON"
        assert name in env, f"{DOCKERFILES[kind].name}: {name} is not set"
        given = dask.config.collect_env({name: env[name]})["distributed"]["nanny"]["pre_spawn_environ"]
        assert given == WORKER_ENVIRON, f"{DOCKERFILES[kind].name}: {name} gives {given}, not {WORKER_ENVIRON}"
    cache = env.get("NUMBA_CACHE_DIR")
    assert cache and cache.startswith("/"), "NUMBA_CACHE_DIR must be an absolute path"
    runs = " ".join(final.all("RUN"))
    assert re.search(rf"mkdir -p \S*{re.escape(posixpath.dirname(cache))}", runs), (
        f"{DOCKERFILES[kind].name}: {cache} is not created"
    )
    assert re.search(rf"chown -R {uid}:\d+ {re.escape(posixpath.dirname(cache))}", runs), (
        f"{DOCKERFILES[kind].name}: {cache} is not owned by uid {uid}"
    )


def test_both_images_use_the_same_numba_cache_dir():
    dirs = {k: env_of(parse_dockerfile(p)[-1])["NUMBA_CACHE_DIR"] for k, p in DOCKERFILES.items()}
    assert len(set(dirs.values())) == 1, dirs


# --------------------------------------------------------------------------- lock file


def test_lock_pins_every_runtime_dependency_within_pyproject_ranges():
    pins = lock_pins()
    deps = [Requirement(d) for d in pyproject()["project"]["dependencies"]]
    for req in deps:
        key = canonicalize_name(req.name)
        assert key in pins, f"requirements.lock does not pin {req.name}"
        version = pins[key][1]
        assert req.specifier.contains(Version(version), prereleases=True), (
            f"lock pins {req.name}=={version}, outside pyproject's {req}"
        )


# --------------------------------------------------------------------------- Helm values


def _check_known_keys(mapping, section, where):
    unknown = set(mapping) - CHART_KEYS[section]
    assert not unknown, f"values.yaml {where}: keys the chart does not read: {sorted(unknown)}"


def _check_mounts(mounts, where):
    volumes = {v["name"]: v for v in mounts["volumes"]}
    for m in mounts["volumeMounts"]:
        assert m["name"] in volumes, f"{where}: volumeMount {m['name']} has no volume"
        assert m["mountPath"].startswith("/")
    return volumes


def test_values_use_chart_keys():
    values = load_yaml("values.yaml")
    _check_known_keys(values, "", "top level")
    for section in ("scheduler", "worker", "jupyter"):
        _check_known_keys(values[section], section, section)
        _check_known_keys(values[section]["image"], "image", f"{section}.image")
        if "mounts" in values[section]:
            _check_known_keys(values[section]["mounts"], "mounts", f"{section}.mounts")


def test_values_pin_one_image_tag_for_scheduler_workers_and_jupyter():
    values = load_yaml("values.yaml")
    images = {s: values[s]["image"] for s in ("scheduler", "worker", "jupyter")}
    tags = {s: img["tag"] for s, img in images.items()}
    assert all(isinstance(t, str) for t in tags.values()), f"quote the tags: {tags}"
    assert set(tags.values()) == {our_image_tag()}, (
        f"tags {tags}, expected {our_image_tag()} (<dmlr version>-dask<Dask image tag>)"
    )
    assert images["scheduler"]["repository"] == images["worker"]["repository"]
    assert images["jupyter"]["repository"] != images["worker"]["repository"], (
        "Jupyter runs the notebook image (deploy/Dockerfile.notebook)"
    )
    assert values["jupyter"]["enabled"] is True


def test_values_worker_resources_threads_and_env():
    values = load_yaml("values.yaml")
    worker = values["worker"]
    assert isinstance(worker["replicas"], int) and worker["replicas"] >= 1
    limits = worker["resources"]["limits"]
    # the chart passes --nthreads/--memory-limit only when resources.limits is set
    assert limits.get("cpu") and limits.get("memory")
    assert worker["resources"]["requests"]
    threads = worker["threads_per_worker"]
    assert isinstance(threads, int) and 1 <= threads <= float(limits["cpu"])
    numba_dir = env_of(parse_dockerfile(DOCKERFILES["dask"])[-1])["NUMBA_CACHE_DIR"]
    for section in ("scheduler", "worker", "jupyter"):
        env = env_list(values[section].get("env") or [])
        for name, entry in env.items():
            if "value" in entry:
                assert isinstance(entry["value"], str), f"{section}.env {name}: Kubernetes env values must be strings"
        assert env["OMP_NUM_THREADS"]["value"] == "1", section
        if section != "scheduler":
            assert env["NUMBA_CACHE_DIR"]["value"] == numba_dir, section
    assert "EXTRA_PIP_PACKAGES" not in str(values) and "EXTRA_CONDA_PACKAGES" not in str(values)


def test_values_mount_the_zarr_data_and_numba_cache():
    values = load_yaml("values.yaml")
    numba_dir = env_list(values["worker"]["env"])["NUMBA_CACHE_DIR"]["value"]
    paths = {}
    for section in ("worker", "jupyter"):
        mounts = values[section]["mounts"]
        volumes = _check_mounts(mounts, section)
        data = [m for m in mounts["volumeMounts"] if "persistentVolumeClaim" in volumes[m["name"]]]
        assert len(data) == 1, f"{section}: mount one data claim"
        paths[section] = (data[0]["mountPath"], volumes[data[0]["name"]]["persistentVolumeClaim"]["claimName"])
        if section == "worker":
            assert data[0].get("readOnly") is True, "workers only read the Zarr stores"
            assert numba_dir in [m["mountPath"] for m in mounts["volumeMounts"]]
    assert paths["worker"] == paths["jupyter"], f"client and workers see different data: {paths}"


def test_values_security_context_matches_image_users():
    values = load_yaml("values.yaml")
    for section, kind in (("scheduler", "dask"), ("worker", "dask"), ("jupyter", "notebook")):
        ctx = values[section]["securityContext"]
        assert ctx["runAsNonRoot"] is True
        assert ctx["runAsUser"] == dockerfile_uid(kind), section


# --------------------------------------------------------------------------- DaskCluster


def _containers(pod_spec):
    return {c["name"]: c for c in pod_spec["containers"]}


def test_daskcluster_is_a_valid_operator_resource():
    docs = list(yaml.safe_load_all((DEPLOY / "daskcluster.yaml").read_text()))
    assert len(docs) == 1
    dc = docs[0]
    assert dc["apiVersion"] == "kubernetes.dask.org/v1"
    assert dc["kind"] == "DaskCluster"
    name = dc["metadata"]["name"]
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 32
    spec = dc["spec"]
    # the CRD's schema (templates.yaml): spec requires scheduler and worker;
    # scheduler requires spec (PodSpec) and service (ServiceSpec); worker requires spec.
    assert set(spec) <= {"idleTimeout", "scheduler", "worker"}
    assert {"scheduler", "worker"} <= set(spec)
    assert set(spec["scheduler"]) <= {"metadata", "spec", "service"}
    assert {"spec", "service"} <= set(spec["scheduler"])
    assert set(spec["worker"]) <= {"metadata", "replicas", "spec"}
    assert isinstance(spec["worker"]["replicas"], int) and spec["worker"]["replicas"] >= 1
    service = spec["scheduler"]["service"]
    ports = {p["name"]: p for p in service["ports"]}
    assert ports["tcp-comm"]["port"] == 8786 and "http-dashboard" in ports
    assert service["selector"] == {"dask.org/cluster-name": name, "dask.org/component": "scheduler"}
    scheduler = _containers(spec["scheduler"]["spec"])["scheduler"]
    assert {p["name"] for p in scheduler["ports"]} >= {"tcp-comm", "http-dashboard"}


def test_daskcluster_runs_the_pinned_image_with_new_cli_and_settings():
    dc = load_yaml("daskcluster.yaml")
    values = load_yaml("values.yaml")
    image = f"{values['worker']['image']['repository']}:{our_image_tag()}"
    worker_pod, scheduler_pod = dc["spec"]["worker"]["spec"], dc["spec"]["scheduler"]["spec"]
    worker = _containers(worker_pod)["worker"]
    scheduler = _containers(scheduler_pod)["scheduler"]
    assert worker["image"] == image and scheduler["image"] == image
    # `dask-worker`/`dask-scheduler` are gone from distributed >= 2026.6: use `dask <cmd>`,
    # which the pinned distributed provides.
    assert worker["args"][:2] == ["dask", "worker"]
    assert scheduler["args"][:2] == ["dask", "scheduler"]
    cli = {ep.name for ep in importlib.metadata.entry_points(group="dask_cli")}
    assert {"worker", "scheduler"} <= cli
    args = worker["args"]
    nthreads = int(args[args.index("--nthreads") + 1])
    assert nthreads <= float(worker["resources"]["limits"]["cpu"])
    assert args[args.index("--memory-limit") + 1] == str(worker["resources"]["limits"]["memory"])
    env = env_list(worker["env"])
    assert env["OMP_NUM_THREADS"]["value"] == "1"
    assert env["NUMBA_CACHE_DIR"]["value"] == env_list(values["worker"]["env"])["NUMBA_CACHE_DIR"]["value"]
    assert "DASK_SCHEDULER_ADDRESS" not in env, "let the operator inject the scheduler address"
    volumes = _check_mounts(
        {"volumes": worker_pod["volumes"], "volumeMounts": worker["volumeMounts"]}, "daskcluster worker"
    )
    data = [m for m in worker["volumeMounts"] if "persistentVolumeClaim" in volumes[m["name"]]]
    assert len(data) == 1 and data[0]["readOnly"] is True
    assert env["NUMBA_CACHE_DIR"]["value"] in [m["mountPath"] for m in worker["volumeMounts"]]
    for pod in (worker_pod, scheduler_pod):
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == dockerfile_uid("dask")


# --------------------------------------------------------------------------- README


def test_readme_documents_the_same_tag_and_the_required_steps():
    text = (DEPLOY / "README.md").read_text()
    tags = set(re.findall(r"\b\d+\.\d+\.\d+-dask[0-9][\w.\-]*\w", text))
    assert tags == {our_image_tag()}, f"deploy/README.md mentions image tags {tags}"
    for needed in (
        "docker build",
        "docker push",
        "helm install",
        "-f deploy/values.yaml",
        "DASK_SCHEDULER_ADDRESS",
        "get_versions(check=True)",
        "TLS",
        "kubectl apply -f deploy/daskcluster.yaml",
    ):
        assert needed in text, f"deploy/README.md does not mention {needed!r}"


# --------------------------------------------------------------------------- the wheel


def _can_build_without_isolation(build_requires) -> bool:
    for spec in build_requires:
        req = Requirement(spec)
        try:
            installed = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            return False
        if not req.specifier.contains(Version(installed), prereleases=True):
            return False
    return True


@pytest.mark.slow
def test_builder_stage_builds_the_wheel_the_final_stage_installs(tmp_path):
    """Recreate the builder stage: its COPYs into a fresh context, then its pip wheel."""
    builder, final = parse_dockerfile(DOCKERFILES["dask"])
    src = tmp_path / "src"
    src.mkdir()
    workdir = builder.all("WORKDIR")[-1]
    for flags, srcs, dst in map(copy_parts, builder.all("COPY")):
        target = posixpath.normpath(posixpath.join(workdir, dst))
        rel = posixpath.relpath(target, workdir)
        assert not rel.startswith(".."), f"builder COPY {dst} lands outside {workdir}"
        dst_path = src / rel
        for s in srcs:  # Docker: a directory's contents go to dst; files into dst/ or as dst
            origin = ROOT / s
            if origin.is_dir():
                shutil.copytree(
                    origin, dst_path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
                )
            elif dst.endswith("/") or len(srcs) > 1:
                dst_path.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, dst_path / origin.name)
            else:
                dst_path.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, dst_path)

    (wheel_cmd,) = [r for r in builder.all("RUN") if "pip wheel" in r]
    words = shlex.split(wheel_cmd)
    out = tmp_path / "wheels"
    words[words.index("-w") + 1] = str(out)
    assert words[:4] == ["python", "-m", "pip", "wheel"] and words[-1] == "."
    cmd = [sys.executable, *words[1:]]
    build_requires = pyproject()["build-system"]["requires"]
    offline = _can_build_without_isolation(build_requires)
    if offline:
        cmd.insert(4, "--no-build-isolation")
    proc = subprocess.run(cmd, cwd=src, capture_output=True, text=True, timeout=600)
    if (
        proc.returncode != 0
        and not offline
        and re.search(
            r"(Could not find a version|No matching distribution|NewConnectionError|"
            r"Temporary failure in name resolution|Network is unreachable)",
            proc.stdout + proc.stderr,
        )
    ):
        pytest.skip(f"building needs {build_requires} from PyPI, which is unreachable here")
    assert proc.returncode == 0, proc.stdout + proc.stderr

    wheels = sorted(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    (install,) = [r for r in final.all("RUN") if "pip install" in r]
    pattern = posixpath.basename(next(w for w in shlex.split(install.split("&&")[0]) if w.endswith(".whl")))
    assert fnmatch.fnmatch(wheels[0].name, pattern), f"{wheels[0].name} does not match {pattern}"

    project = pyproject()["project"]
    with zipfile.ZipFile(wheels[0]) as zf:
        names = set(zf.namelist())
        dist_info = f"dmlr-{project['version']}.dist-info"
        assert "dmlr/__init__.py" in names
        sources = {
            p.relative_to(ROOT).as_posix() for p in (ROOT / "dmlr").rglob("*.py") if "__pycache__" not in p.parts
        }
        assert sources <= names, f"wheel misses {sorted(sources - names)[:5]}"
        entry_points = configparser.ConfigParser()
        entry_points.read_string(zf.read(f"{dist_info}/entry_points.txt").decode())
        assert entry_points["console_scripts"]["dmlr"].strip() == project["scripts"]["dmlr"]
        metadata = zf.read(f"{dist_info}/METADATA").decode()
    assert re.search(rf"^Version: {re.escape(project['version'])}$", metadata, re.M)
    # setuptools builds silently without the readme: check the builder copied it
    description = metadata.partition("\n\n")[2]
    assert description.strip() == (ROOT / project["readme"]).read_text().strip(), (
        "the wheel's long description is not the README (is it copied into the builder?)"
    )
    requires = {
        str(Requirement(line.split(":", 1)[1]))
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    }
    assert requires == {str(Requirement(d)) for d in project["dependencies"]}
    pins = lock_pins()
    assert {canonicalize_name(Requirement(r).name) for r in requires} <= set(pins)
