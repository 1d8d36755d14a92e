"""Adapter: the Pulsar admin REST client for a peer group of clusters.

The only package that speaks HTTP to Pulsar; the controller and the collector use it.
"""

from balancer.pulsar.auth import AuthConfigError, BearerTokenAuth, TlsSettings, TokenSource
from balancer.pulsar.broker_admin import LoadReportUnavailableError
from balancer.pulsar.broker_models import LeaderBroker, OwnedBundle
from balancer.pulsar.client import PulsarPeerGroup
from balancer.pulsar.errors import (
    BadRequestError,
    ClientError,
    ConflictError,
    ForbiddenError,
    InvalidResponseError,
    NotFoundError,
    OutcomeUnknownError,
    PreconditionFailedError,
    PulsarAdminError,
    RedirectLoopError,
    RedirectRefusedError,
    ServerError,
    TooManyRedirectsError,
    TooManyRequestsError,
    UnauthorizedError,
    UnavailableError,
)
from balancer.pulsar.models import (
    BrokerTopicStats,
    BrokerTopicStatsEntry,
    ClusterData,
    InternalStats,
    LedgerInfo,
    MessageId,
    OffloadState,
    OffloadStatus,
    RejectedTopicEntry,
    SubscriptionStats,
    TopicHashPositions,
    TopicStats,
)
from balancer.pulsar.retry import RetryPolicy
from balancer.pulsar.routing import ClusterEndpoint, RoutingConfigError, routed_to
from balancer.pulsar.settings import ClientSettings
from balancer.pulsar.timeouts import Timeouts
from balancer.pulsar.transport import RequestKey, RequestRecord

__all__ = [
    "AuthConfigError",
    "BadRequestError",
    "BearerTokenAuth",
    "BrokerTopicStats",
    "BrokerTopicStatsEntry",
    "ClientError",
    "ClientSettings",
    "ClusterData",
    "ClusterEndpoint",
    "ConflictError",
    "ForbiddenError",
    "InternalStats",
    "InvalidResponseError",
    "LeaderBroker",
    "LedgerInfo",
    "LoadReportUnavailableError",
    "MessageId",
    "NotFoundError",
    "OffloadState",
    "OffloadStatus",
    "OutcomeUnknownError",
    "OwnedBundle",
    "PreconditionFailedError",
    "PulsarAdminError",
    "PulsarPeerGroup",
    "RedirectLoopError",
    "RedirectRefusedError",
    "RejectedTopicEntry",
    "RequestKey",
    "RequestRecord",
    "RetryPolicy",
    "RoutingConfigError",
    "ServerError",
    "SubscriptionStats",
    "Timeouts",
    "TlsSettings",
    "TokenSource",
    "TooManyRedirectsError",
    "TooManyRequestsError",
    "TopicHashPositions",
    "TopicStats",
    "UnauthorizedError",
    "UnavailableError",
    "routed_to",
]
