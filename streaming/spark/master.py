"""Spark master URLs: the forms Spark itself accepts, checked before a JVM is started.

A master Spark cannot parse fails only once the SparkContext starts, as a long Java
traceback; the config and the stream refuse it up front with one line. The forms are
Spark 4's (`SparkContext.createTaskScheduler`, `SparkMasterRegex`, and the cluster
managers it loads: standalone, YARN, Kubernetes; Mesos support was removed in Spark 4).
"""

from __future__ import annotations

import re

_LOCAL = re.compile(r"local(\[(?P<threads>[0-9]+|\*)(\s*,\s*(?P<failures>[0-9]+))?\])?")
_LOCAL_CLUSTER = re.compile(r"local-cluster\[\s*[0-9]+\s*,\s*[0-9]+\s*,\s*[0-9]+\s*\]")
# RpcAddress.fromSparkURL: host and port of each master of a standalone (HA) cluster.
_HOST_PORT = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(?P<port>[0-9]{1,5})")
# KubernetesUtils.parseMasterUrl: k8s://host:port, or k8s:// followed by an http(s) URL.
_K8S = re.compile(r"k8s://(https?://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:[0-9]{1,5})?/?")

FORMS = "local, local[N], local[*], local[N,F], spark://host:port[,host:port], yarn, k8s://..."


class SparkMasterError(ValueError):
    """A master URL Spark would refuse."""


def check_master(master: str) -> None:
    """Raise SparkMasterError unless Spark accepts `master` as a master URL."""
    local = _LOCAL.fullmatch(master)
    if local is not None:
        threads = local.group("threads")
        if threads is not None and threads != "*" and int(threads) < 1:
            raise SparkMasterError(f"{master!r}: local mode needs at least 1 thread")
        return
    if master == "yarn" or _LOCAL_CLUSTER.fullmatch(master) or _K8S.fullmatch(master):
        return
    if master.startswith("spark://"):
        hosts = master.removeprefix("spark://").split(",")
        if all(_valid_host_port(h) for h in hosts):
            return
        raise SparkMasterError(f"{master!r}: a standalone master is spark://host:port[,host:port]")
    shown = master if len(master) <= 80 else master[:80] + "..."
    raise SparkMasterError(f"{shown!r} is not a Spark master URL ({FORMS})")


def _valid_host_port(text: str) -> bool:
    match = _HOST_PORT.fullmatch(text)
    return match is not None and 0 < int(match.group("port")) <= 65535
