"""Podman, driven from the tests: a local base image, deploy/'s images, containers.

Used by tests/test_images.py to build deploy/Dockerfile and
deploy/Dockerfile.notebook and run them as a Dask cluster. What this kind of
machine needs, and why:

* No image registry is reachable, so the official Dask images cannot be
  pulled. :func:`base_image` builds a Debian bookworm rootfs with
  ``mmdebstrap`` (Python 3.11, the lock's, in a venv at ``/opt/venv`` owned by
  uid 1000 / gid 100 as the docker-stacks images own theirs) and ``podman
  import``\\ s it. The image is named after a hash of its recipe and kept in
  podman's storage, so later runs on the same machine reuse it.
* pip inside a build reaches the package index only with the host's CA
  bundle: :meth:`Resources.build` bind-mounts it read-only at the same path for the
  build (``podman build -v``), which puts nothing in a layer.
* podman's default runtime (crun) and its default ulimits (above what root
  may set without CAP_SYS_RESOURCE) fail on some hosts: :func:`engine_env`
  writes a ``containers.conf`` naming ``runc`` and ulimits that root may set
  (:func:`container_ulimits`), for builds and runs alike.

Every command runs with a timeout. Containers, networks and volumes carry a
per-run name prefix (:func:`run_id`); :class:`Resources` removes what it
started, also after a failure.
"""

from __future__ import annotations

import hashlib
import os
import re
import resource
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from netns import _pid_alive

#: The host's CA bundle (Debian's path), mounted read-only into builds that run pip.
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
#: The local base's recipe: everything that decides its content, hashed into its tag.
BASE_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
BASE_VENV = "/opt/venv"
#: The docker-stacks notebook images' user, who owns their Python environment.
NB_UID, NB_GID = 1000, 100
BASE_HOOK = (
    f"python3 -m venv {BASE_VENV}; "
    f"useradd --uid {NB_UID} --gid {NB_GID} --no-create-home --home-dir /home/jovyan "
    f"--shell /bin/bash jovyan; mkdir -p /home/jovyan; "
    f"chown -R {NB_UID}:{NB_GID} {BASE_VENV} /home/jovyan"
)
BASE_CHANGES = (f"ENV PATH={BASE_VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
BASE_REPOSITORY = "localhost/dmlr-test-base"
#: Repository of the per-run tags of the images a run builds (see :class:`Resources`).
RUN_REPOSITORY = "localhost/dmlr-test-run"
#: Lines for the end of the pytest run (build times, sizes, results; tests/conftest.py prints them).
SUMMARY: list[str] = []


class ContainersUnavailable(RuntimeError):
    """Containers cannot run here at all (the message says why)."""


class CommandFailed(RuntimeError):
    """A podman (or mmdebstrap) command exited non-zero; the message has its output."""


def run_id() -> str:
    """A name prefix unique to this run: ``dmlr-test-<pid>-<random>``."""
    return f"dmlr-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def remove_stale(podman: Podman) -> list[str]:
    """Remove the containers, networks, volumes and image tags of runs that died before
    cleaning up (named ``dmlr-test-<pid>-...`` with that pid gone); returns their names."""
    stale = []
    for listing, remove in (
        (("ps", "-a", "--format", "{{.Names}}"), ("rm", "-f", "-v", "-t", "0")),
        (("network", "ls", "--format", "{{.Name}}"), ("network", "rm", "-f")),
        (("volume", "ls", "--format", "{{.Name}}"), ("volume", "rm", "-f")),
        (("images", "--filter", f"reference={RUN_REPOSITORY}", "--format", "{{.Repository}}:{{.Tag}}"), ("rmi",)),
    ):
        for name in podman.run(*listing, timeout=60).stdout.split():
            m = re.fullmatch(r"(?:.*:)?dmlr-test-(\d+)-[0-9a-f]+-.*", name)
            if m and not _pid_alive(int(m.group(1))):
                podman.run(*remove, name, timeout=120, check=False)
                stale.append(name)
    return stale


def container_ulimits() -> dict[str, int]:
    """nofile and nproc for containers: limits runc can set without CAP_SYS_RESOURCE.

    nofile: this process's hard limit (at most 1048576). nproc: at most 32768, because the
    limit runc can set is below this process's hard limit (measured on a host
    with a hard nproc limit of 96365: 32768 starts a container, 32769 fails
    with "error setting rlimit type 6: operation not permitted").
    """

    def hard(kind):
        limit = resource.getrlimit(kind)[1]
        return None if limit == resource.RLIM_INFINITY else limit

    caps = {"nofile": (1048576, hard(resource.RLIMIT_NOFILE)), "nproc": (32768, hard(resource.RLIMIT_NPROC))}
    return {name: min(cap, limit or cap) for name, (cap, limit) in caps.items()}


def engine_env(workdir: Path) -> dict:
    """Environment for podman: this one plus ``CONTAINERS_CONF`` (runc, ulimits we may set)."""
    ulimits = ", ".join(f'"{name}={n}:{n}"' for name, n in container_ulimits().items())
    conf = workdir / "containers.conf"
    conf.write_text(f'[containers]\ndefault_ulimits = [{ulimits}]\n\n[engine]\nruntime = "runc"\n')
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


@dataclass
class Podman:
    """``podman`` with one environment and a timeout on every call."""

    env: dict
    exe: str = "podman"

    def run(self, *args, timeout: float, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        cmd = [self.exe, *map(str, args)]
        try:
            proc = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout, **kwargs)
        except subprocess.TimeoutExpired as e:
            raise CommandFailed(
                f"timed out after {timeout:.0f} s: {' '.join(cmd)}\n{_text(e.stdout)}{_text(e.stderr)}"
            ) from None
        if check and proc.returncode != 0:
            raise CommandFailed(f"exit {proc.returncode}: {' '.join(cmd)}\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}")
        return proc

    def exists(self, image: str) -> bool:
        return self.run("image", "exists", image, timeout=60, check=False).returncode == 0

    def image_id(self, ref: str) -> str | None:
        proc = self.run("image", "inspect", "--format", "{{.Id}}", ref, timeout=60, check=False)
        if proc.returncode != 0:
            return None
        return proc.stdout.strip() or None

    def image_size(self, ref: str) -> int:
        return int(self.run("image", "inspect", "--format", "{{.Size}}", ref, timeout=60).stdout.strip())


def _text(b) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def find_podman(workdir: Path) -> Podman:
    """Podman, with the environment of :func:`engine_env`; raises :class:`ContainersUnavailable`."""
    exe = shutil.which("podman")
    if exe is None:
        raise ContainersUnavailable(
            "podman is not installed (.ci/run installs podman, runc and mmdebstrap "
            "from Debian's packages where apt-get works)"
        )
    return Podman(env=engine_env(workdir), exe=exe)


def probe(podman: Podman, image: str) -> None:
    """Run ``true`` in ``image``; raises :class:`ContainersUnavailable` with podman's error if it cannot."""
    proc = podman.run("run", "--rm", "--pull=never", "--network=none", image, "true", timeout=120, check=False)
    if proc.returncode != 0:
        raise ContainersUnavailable(f"podman cannot run a container here: {proc.stderr.strip()[-2000:]}")


def base_tag() -> str:
    recipe = repr((BASE_SUITE, BASE_PACKAGES, BASE_HOOK, BASE_CHANGES))
    return f"{BASE_REPOSITORY}:{BASE_SUITE}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"


def base_image(podman: Podman, workdir: Path) -> tuple[str, float | None]:
    """The local base image (built if this machine has none): (reference, seconds spent building or None).

    Raises :class:`ContainersUnavailable` when there is none and mmdebstrap is missing.
    """
    tag = base_tag()
    if podman.exists(tag):
        return tag, None
    mmdebstrap = shutil.which("mmdebstrap")
    if mmdebstrap is None:
        raise ContainersUnavailable(
            f"no base image: {tag} is not in podman's storage and mmdebstrap, which "
            "builds it (no image registry is reachable), is not installed"
        )
    start = time.monotonic()
    tar = workdir / "base.tar"
    cmd = [
        mmdebstrap,
        "--variant=minbase",
        f"--include={','.join(BASE_PACKAGES)}",
        f"--customize-hook=chroot \"$1\" sh -ec '{BASE_HOOK}'",
        BASE_SUITE,
        str(tar),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise CommandFailed(f"timed out after 600 s: {' '.join(cmd)}") from None
    if proc.returncode != 0:
        raise CommandFailed(f"exit {proc.returncode}: {' '.join(cmd)}\n{proc.stderr[-4000:]}")
    changes = [a for c in BASE_CHANGES for a in ("--change", c)]
    try:
        podman.run("import", *changes, tar, tag, timeout=300)
    finally:
        tar.unlink(missing_ok=True)
    return tag, time.monotonic() - start


@dataclass
class Resources:
    """Images, containers, networks and volumes of one run, removed by :meth:`close`.

    Images are tagged twice: with the deployment's tag, which stays (the next
    run's layer cache), and with a tag of this run (:data:`RUN_REPOSITORY`),
    which :meth:`close` removes. An image is deleted with its last tag, so an
    image that another run has since re-tagged away goes with this run's tag,
    and podman refuses to delete by id an image that a run still tags: a
    build removes the image it displaced only when no run holds it.
    """

    podman: Podman
    prefix: str
    images: list = field(default_factory=list)
    containers: list = field(default_factory=list)
    networks: list = field(default_factory=list)
    volumes: list = field(default_factory=list)

    def name(self, role: str) -> str:
        return f"{self.prefix}-{role}"

    def build(
        self, context: Path, dockerfile: Path, tag: str, build_args: dict, workdir: Path, timeout: float = 600
    ) -> tuple[str, float]:
        """``podman build`` of ``dockerfile`` (its ``<name>.dockerignore`` applies): (image id, seconds).

        The host's CA bundle is mounted read-only for the build only.
        """
        previous = self.podman.image_id(tag)
        run_tag = f"{RUN_REPOSITORY}:{self.name(dockerfile.name.lower().replace('.', '-'))}"
        iidfile = workdir / f"{dockerfile.name}.iid"
        args = ["build", "--pull=never", "--layers", "-f", dockerfile, "--iidfile", iidfile, "-t", tag, "-t", run_tag]
        ignore = Path(f"{dockerfile}.dockerignore")
        if ignore.exists():
            args += ["--ignorefile", ignore]
        for k, v in build_args.items():
            args += ["--build-arg", f"{k}={v}"]
        if CA_BUNDLE.exists():
            args += ["-v", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"]
        start = time.monotonic()
        self.images.append(run_tag)
        self.podman.run(*args, context, timeout=timeout)
        seconds = time.monotonic() - start
        image = iidfile.read_text().strip().removeprefix("sha256:")
        if previous and previous.removeprefix("sha256:") != image:
            # by id: refused while another run's tag or a container holds it
            self.podman.run("rmi", previous, timeout=120, check=False)
        return image, seconds

    def network(self, role: str) -> str:
        # internal: containers reach each other (names resolve), never the outside
        name = self.name(role)
        self.podman.run("network", "create", "--internal", name, timeout=60)
        self.networks.append(name)
        return name

    def volume(self, role: str) -> str:
        name = self.name(role)
        self.podman.run("volume", "create", name, timeout=60)
        self.volumes.append(name)
        return name

    def start(self, role: str, image: str, *args, options=(), timeout: float = 120) -> str:
        """``podman run -d`` (no ``--rm``: a dead container stays inspectable until :meth:`close`)."""
        name = self.name(role)
        self.containers.append(name)
        self.podman.run(
            "run",
            "-d",
            "--pull=never",
            "--name",
            name,
            "--label",
            f"dmlr-test={self.prefix}",
            *options,
            image,
            *args,
            timeout=timeout,
        )
        return name

    def state(self, name: str) -> dict:
        fmt = "{{.State.Status}} {{.State.ExitCode}}"
        status, code = self.podman.run("inspect", "--format", fmt, name, timeout=60).stdout.split()
        return {"status": status, "exit_code": int(code)}

    def logs(self, name: str, tail: int = 40) -> str:
        proc = self.podman.run("logs", "--tail", tail, name, timeout=60, check=False)
        return proc.stdout + proc.stderr

    def close(self) -> list[str]:
        """Remove everything; returns the errors (removal goes on past them)."""
        errors = []
        for kind, names, cmd in (
            ("container", self.containers, ("rm", "-f", "-v", "-t", "0")),
            ("network", self.networks, ("network", "rm", "-f")),
            ("volume", self.volumes, ("volume", "rm", "-f")),
            ("image", self.images, ("rmi",)),
        ):
            for name in reversed(names):
                try:
                    proc = self.podman.run(*cmd, name, timeout=120, check=False)
                    if proc.returncode != 0 and not re.search(r"no such|image not known", proc.stderr, re.I):
                        errors.append(f"{kind} {name}: {proc.stderr.strip()}")
                except CommandFailed as e:
                    errors.append(f"{kind} {name}: {e}")
            names.clear()
        return errors


def converse(podman: Podman, args, answer, timeout: float) -> tuple[int, list[str], str]:
    """Run ``podman *args`` with pipes; ``answer(line)`` sees each stdout line and may return a reply
    for its stdin. Returns (exit code, stdout lines, stderr); kills the command at ``timeout`` seconds."""
    import selectors
    import tempfile

    deadline = time.monotonic() + timeout
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [podman.exe, *map(str, args)],
            env=podman.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            bufsize=1,
        )
        lines = []
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            try:
                while True:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise CommandFailed(
                            f"timed out after {timeout:.0f} s: podman {' '.join(map(str, args))}"
                            "\n" + "".join(lines[-20:])
                        )
                    if not sel.select(remaining):
                        continue
                    line = proc.stdout.readline()
                    if not line:
                        break
                    lines.append(line)
                    reply = answer(line.rstrip("\n"))
                    if reply is not None:
                        proc.stdin.write(reply + "\n")
                        proc.stdin.flush()
                code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        err.seek(0)
        return code, lines, err.read()
