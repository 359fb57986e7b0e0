"""A private virtual LAN of Linux network namespaces, for tests that need separate hosts.

:class:`VirtualLan` makes one namespace holding a bridge and, per host, a
namespace whose ``eth0`` is one end of a veth pair (the other end is a port of
the bridge) with its own 10.x address. Every namespace is new and empty, so
the host's own interfaces, routes and firewall are never touched, and the
same addresses can be used by concurrent runs. Names carry the pid, so
parallel runs do not collide.

Needs root (CAP_NET_ADMIN + CAP_SYS_ADMIN for ``ip netns exec``) and
``ip`` from iproute2; :func:`VirtualLan.create` raises :class:`NetnsUnavailable`
with the reason when either is missing, for the caller to skip on.

Processes started with :meth:`VirtualLan.popen` run in a host namespace in
their own session; :meth:`VirtualLan.close` kills them (SIGTERM, then SIGKILL
to the whole process group) and deletes the namespaces, which also destroys
the veth pairs and the bridge. Namespaces left behind by a run that was
killed (its pid is gone) are removed by the next :meth:`VirtualLan.create`.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be used here (the message says why)."""


def find_ip() -> str | None:
    """Path of iproute2's ``ip``, also when sbin is not on PATH."""
    for cand in (shutil.which("ip"), "/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _delete_netns(ip_cmd: str, ns: str) -> None:
    """Delete namespace ``ns`` after SIGKILLing the processes still inside it (ours, see callers)."""
    pids = subprocess.run([ip_cmd, "netns", "pids", ns], capture_output=True, text=True).stdout
    for pid in pids.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    subprocess.run([ip_cmd, "netns", "del", ns], capture_output=True)


def _remove_stale(ip_cmd: str, tag: str) -> None:
    """Delete the namespaces (and their processes) left by runs of this helper that died uncleanly.

    Only names ``dmlr-<tag>-<pid>-...`` whose pid is no longer running are touched.
    """
    r = subprocess.run([ip_cmd, "netns", "list"], capture_output=True, text=True)
    for m in re.finditer(rf"^(dmlr-{re.escape(tag)}-(\d+)-\S+)", r.stdout, re.M):
        if not _pid_alive(int(m.group(2))):
            _delete_netns(ip_cmd, m.group(1))


@dataclass
class Host:
    name: str  # role, e.g. "scheduler"
    netns: str  # namespace name
    ip: str  # its address on the LAN


@dataclass
class VirtualLan:
    ip_cmd: str
    prefix: str  # namespace names start with this
    subnet: str = "10.77.0"  # /24; hosts get .2, .3, ...
    hosts: dict = field(default_factory=dict)
    procs: list = field(default_factory=list)
    namespaces: list = field(default_factory=list)

    # -- set-up -------------------------------------------------------------------
    @classmethod
    def create(cls, roles, *, tag: str = "lan", subnet: str = "10.77.0") -> VirtualLan:
        """A bridge namespace plus one namespace per role in ``roles``, all linked."""
        if os.name != "posix" or not Path("/proc/self/ns/net").exists():
            raise NetnsUnavailable("not Linux: no network namespaces")
        if os.geteuid() != 0:
            raise NetnsUnavailable("needs root (CAP_NET_ADMIN/CAP_SYS_ADMIN) for `ip netns`")
        ip_cmd = find_ip()
        if ip_cmd is None:
            raise NetnsUnavailable("`ip` (iproute2) is not installed")
        _remove_stale(ip_cmd, tag)
        lan = cls(ip_cmd=ip_cmd, prefix=f"dmlr-{tag}-{os.getpid()}", subnet=subnet)
        try:
            lan._build(list(roles))
        except BaseException:
            lan.close()
            raise
        return lan

    def _ip(self, *args, unavailable: bool = False) -> str:
        r = subprocess.run([self.ip_cmd, *args], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            msg = f"`ip {' '.join(args)}` failed: {r.stderr.strip() or r.returncode}"
            raise NetnsUnavailable(msg) if unavailable else RuntimeError(msg)
        return r.stdout

    def _add_netns(self, name: str) -> None:
        self._ip("netns", "add", name, unavailable=True)
        self.namespaces.append(name)
        self._ip("-n", name, "link", "set", "lo", "up", unavailable=True)

    def _build(self, roles: list[str]) -> None:
        br = f"{self.prefix}-br"
        self._add_netns(br)
        # bridge or veth support missing from the kernel also means "cannot run here"
        self._ip("-n", br, "link", "add", "br0", "type", "bridge", unavailable=True)
        self._ip("-n", br, "link", "set", "br0", "up")
        for i, role in enumerate(roles):
            ns, port = f"{self.prefix}-{role}", f"p{i}"
            self._add_netns(ns)
            self._ip(
                "-n", br, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns, unavailable=True
            )
            self._ip("-n", br, "link", "set", port, "master", "br0", "up")
            addr = f"{self.subnet}.{i + 2}"
            self._ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            self._ip("-n", ns, "link", "set", "eth0", "up")
            self.hosts[role] = Host(role, ns, addr)
        # `ip netns exec` also needs to make a mount namespace (CAP_SYS_ADMIN)
        first = self.hosts[roles[0]].netns
        r = subprocess.run([self.ip_cmd, "netns", "exec", first, "true"], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise NetnsUnavailable(f"`ip netns exec` failed: {r.stderr.strip() or r.returncode}")

    # -- processes ----------------------------------------------------------------
    def argv(self, role: str, argv) -> list[str]:
        """``argv`` prefixed to run inside ``role``'s namespace."""
        return [self.ip_cmd, "netns", "exec", self.hosts[role].netns, *map(str, argv)]

    def popen(self, role: str, argv, *, log: Path, env=None, cwd=None) -> subprocess.Popen:
        """Start ``argv`` on host ``role`` in its own session, output to ``log``; killed by :meth:`close`."""
        with open(log, "wb") as out:
            p = subprocess.Popen(
                self.argv(role, argv), stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
            )
        self.procs.append(p)
        return p

    # -- tear-down ----------------------------------------------------------------
    def _signal_all(self, sig) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, sig)  # the session leader's group: nanny and worker too
            except ProcessLookupError:
                pass

    def close(self) -> None:
        """Kill the processes started here, then delete every namespace made here."""
        if self.procs:
            self._signal_all(signal.SIGTERM)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and any(p.poll() is None for p in self.procs):
                time.sleep(0.1)
            self._signal_all(signal.SIGKILL)  # also any grandchildren still in the groups
            for p in self.procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            self.procs = []
        for ns in reversed(self.namespaces):
            # processes of ours that escaped the groups would keep the namespace's links alive
            _delete_netns(self.ip_cmd, ns)
        self.namespaces = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
