"""One Kubernetes connection: the client APIs, configured from the in-cluster service account or a kubeconfig.

``kubernetes`` is imported here, when a command needs the cluster, never at import time: it is an optional extra
(`pip install 'llm-loadgen[k8s]'`), and a missing extra is a usage error (exit 2) that says how to install it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import yaml

__all__ = ["Cluster", "K8sError", "connect"]

MISSING_EXTRA = "the Kubernetes commands need the `kubernetes` package: pip install 'llm-loadgen[k8s]'"


class K8sError(Exception):
    """A cluster problem the user can act on (no cluster config, nothing matched, an API refusal)."""


@dataclass
class Cluster:
    """The typed APIs over one ApiClient, and the namespace commands default to."""

    api_client: Any
    core: Any
    apps: Any
    batch: Any
    networking: Any
    namespace: str
    in_cluster: bool = False  # connected with the pod's service account (its Role's rights), not a kubeconfig

    def close(self) -> None:
        self.api_client.close()


def _import() -> Any:
    try:
        import kubernetes
    except ImportError:
        raise K8sError(MISSING_EXTRA) from None
    return kubernetes


def connect(kubeconfig: str | None = None, context: str | None = None, namespace: str | None = None) -> Cluster:
    """In a pod with a service account token (and no explicit kubeconfig): in-cluster config; else the kubeconfig
    (``--kubeconfig``, ``$KUBECONFIG``, ``~/.kube/config``). The default namespace follows the same source."""
    k8s = _import()
    # Read here, not when kubernetes was imported (its default path is fixed at import time).
    kubeconfig = kubeconfig or os.environ.get("KUBECONFIG") or None
    sa_ns = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    in_cluster = bool(kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST") and os.path.exists(sa_ns))
    if in_cluster:
        cfg = k8s.client.Configuration()
        k8s.config.load_incluster_config(client_configuration=cfg)
        api_client = k8s.client.ApiClient(cfg)
        with open(sa_ns, encoding="utf-8") as f:
            default_ns = f.read().strip()
    else:
        try:
            api_client = k8s.config.new_client_from_config(config_file=kubeconfig, context=context)
            _, active = k8s.config.list_kube_config_contexts(config_file=kubeconfig)
        except (k8s.config.ConfigException, OSError, yaml.YAMLError, TypeError) as e:
            # A usage error (exit 2), whatever the file holds: not YAML (yaml's error), YAML that is no mapping
            # (the client's TypeError), a mapping without what a kubeconfig needs (ConfigException).
            why = "not a kubeconfig (a mapping of clusters, users and contexts)" if isinstance(e, TypeError) else e
            raise K8sError(
                f"no Kubernetes configuration: {' '.join(str(why).split())} (in a pod: a service account; else a "
                "kubeconfig)"
            ) from None
        if context:
            contexts = k8s.config.list_kube_config_contexts(config_file=kubeconfig)[0]
            active = next((c for c in contexts if c["name"] == context), active)
        default_ns = (active or {}).get("context", {}).get("namespace") or "default"
    return Cluster(
        api_client=api_client,
        core=k8s.client.CoreV1Api(api_client),
        apps=k8s.client.AppsV1Api(api_client),
        batch=k8s.client.BatchV1Api(api_client),
        networking=k8s.client.NetworkingV1Api(api_client),
        namespace=namespace or default_ns,
        in_cluster=in_cluster,
    )


def api_exception() -> type[Exception]:
    """The client's ApiException class (for ``except``), imported lazily like the rest."""
    exc: type[Exception] = _import().client.exceptions.ApiException
    return exc
