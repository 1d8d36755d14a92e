"""Build the admin client from the balancer's config (`clusters:` of conf/balancer.yaml).

Each cluster keeps its own token source, CA bundle and timeouts; nothing is read here
except the token (file or env var), so a bad source fails at start-up.
"""

from __future__ import annotations

from balancer.app.config import BalancerConfig, ClusterConfig
from balancer.pulsar.auth import TlsSettings, TokenSource
from balancer.pulsar.client import PulsarPeerGroup
from balancer.pulsar.routing import ClusterEndpoint
from balancer.pulsar.settings import ClientSettings
from balancer.pulsar.timeouts import Timeouts


def endpoint_from_config(cluster: ClusterConfig) -> ClusterEndpoint:
    """One cluster's endpoint; `request_timeout_s` bounds each read and write of an attempt."""
    token: TokenSource | None = None
    if cluster.token_file is not None:
        token = TokenSource(file=cluster.token_file)
    elif cluster.token_env is not None:
        token = TokenSource(env_var=cluster.token_env)
    return ClusterEndpoint(
        cluster.name,
        cluster.admin_url,
        token=token,
        tls=TlsSettings(ca_bundle=cluster.tls_ca_file, verify=cluster.tls_verify),
        timeouts=Timeouts(
            connect_s=cluster.connect_timeout_s,
            read_s=cluster.request_timeout_s,
            write_s=cluster.request_timeout_s,
        ),
    )


def peer_group_from_config(
    config: BalancerConfig, settings: ClientSettings | None = None
) -> PulsarPeerGroup:
    """The client for every configured cluster; the first one is the entry cluster.

    `settings` holds what the config does not (retries, the on_request hook, ...); each
    cluster's token, TLS and timeouts come from its endpoint.
    """
    return PulsarPeerGroup([endpoint_from_config(c) for c in config.clusters], settings)
