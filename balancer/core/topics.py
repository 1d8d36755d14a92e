"""Pulsar topic names: parse, normalise and take apart, as pulsar-common's TopicName does.

Purely computational, with no side effects.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from enum import StrEnum

PARTITION_SUFFIX = "-partition-"
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"

# Pulsar's NamedEntity rule for tenant and namespace names (Java's \w is ASCII-only).
_ENTITY_NAME = re.compile(r"[-=:.\w]+", re.ASCII)
# A partition index as Pulsar's TopicName.getPartitionIndex accepts it: a non-negative int
# without leading zeros ("x-partition-01" is not a partition), at most Integer.MAX_VALUE.
_PARTITION_INDEX = re.compile(r"0|[1-9][0-9]{0,9}")
_INT_MAX = 2**31 - 1
# Pulsar's TopicName sets no length limit, but every admin call on a topic carries its name
# in the HTTP request line, and brokers cap request line plus headers at
# httpMaxRequestHeaderSize, 8 KiB by default (ServiceConfiguration). A longer name can never
# be looked up, split or offloaded through the admin API: refusing it is safe.
MAX_TOPIC_NAME_BYTES = 8 * 1024
_PREVIEW_CHARS = 40


class InvalidTopicName(ValueError):
    """A topic name Pulsar would reject; the message names the problem."""


class TopicDomain(StrEnum):
    PERSISTENT = "persistent"
    NON_PERSISTENT = "non-persistent"


@dataclass(frozen=True, slots=True)
class TopicName:
    domain: TopicDomain
    tenant: str
    namespace: str
    local_name: str

    @property
    def full(self) -> str:
        return f"{self.domain.value}://{self.tenant}/{self.namespace}/{self.local_name}"

    @property
    def namespace_name(self) -> str:
        """`tenant/namespace`, the key Pulsar uses for a namespace."""
        return f"{self.tenant}/{self.namespace}"

    @property
    def partition_index(self) -> int | None:
        """The `N` of a `-partition-N` name, or None for a non-partition topic."""
        head, sep, tail = self.local_name.rpartition(PARTITION_SUFFIX)
        if not sep or not head or not _PARTITION_INDEX.fullmatch(tail) or int(tail) > _INT_MAX:
            return None
        return int(tail)

    @property
    def is_partition(self) -> bool:
        return self.partition_index is not None

    @property
    def base(self) -> TopicName:
        """The partitioned topic this partition belongs to (itself when not a partition)."""
        if self.partition_index is None:
            return self
        head = self.local_name.rpartition(PARTITION_SUFFIX)[0]
        return TopicName(self.domain, self.tenant, self.namespace, head)

    def partition(self, index: int) -> TopicName:
        if index < 0:
            raise InvalidTopicName(f"partition index must be >= 0, got {index}")
        return TopicName(
            self.domain,
            self.tenant,
            self.namespace,
            f"{self.base.local_name}{PARTITION_SUFFIX}{index}",
        )

    def __str__(self) -> str:
        return self.full


def check_topic_text(name: str) -> None:
    """Refuse text that cannot be a usable topic name: too long, or with control characters.

    For names typed by a person (the CLI); the error shows a short, escaped preview only.
    """
    size = len(name.encode("utf-8", errors="surrogatepass"))
    preview = name[:_PREVIEW_CHARS] + ("..." if len(name) > _PREVIEW_CHARS else "")
    if size > MAX_TOPIC_NAME_BYTES:
        raise InvalidTopicName(
            f"topic name {preview!r} is {size} bytes long; at most {MAX_TOPIC_NAME_BYTES} "
            "fit in a Pulsar admin request (httpMaxRequestHeaderSize)"
        )
    for index, char in enumerate(name):
        if unicodedata.category(char) == "Cc":
            raise InvalidTopicName(
                f"topic name {preview!r} has control character U+{ord(char):04X} "
                f"at position {index}"
            )


def parse_topic(name: str) -> TopicName:
    """Normalise any accepted spelling of a topic name to its full form.

    `my-topic` -> `persistent://public/default/my-topic`; `t/ns/x` -> `persistent://t/ns/x`;
    V1 names (with a cluster part) are rejected, as Pulsar rejects them for V2 namespaces.
    """
    if not isinstance(name, str):
        raise InvalidTopicName(f"topic name must be a string, got {type(name).__name__}")
    if not name or name != name.strip():
        raise InvalidTopicName(f"topic name {name!r} is empty or has surrounding whitespace")
    if "://" in name:
        scheme, _, rest = name.partition("://")
        try:
            domain = TopicDomain(scheme)
        except ValueError:
            raise InvalidTopicName(
                f"topic name {name!r} has unknown domain {scheme!r} "
                "(expected 'persistent' or 'non-persistent')"
            ) from None
    else:
        domain, rest = TopicDomain.PERSISTENT, name
        if "/" not in rest:
            rest = f"{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}/{rest}"
        elif rest.count("/") != 2:
            raise InvalidTopicName(
                f"topic name {name!r}: a short name is 'topic' or 'tenant/namespace/topic'"
            )
    parts = rest.split("/", 3)
    if len(parts) == 4:
        raise InvalidTopicName(
            f"topic name {name!r} has a cluster part (V1 name); use tenant/namespace/topic"
        )
    if len(parts) != 3:
        raise InvalidTopicName(f"topic name {name!r} must be domain://tenant/namespace/topic")
    tenant, namespace, local_name = parts
    for what, value in (("tenant", tenant), ("namespace", namespace)):
        if not _ENTITY_NAME.fullmatch(value):
            raise InvalidTopicName(
                f"topic name {name!r} has an invalid {what} {value!r} "
                "(allowed: letters, digits, -=:._)"
            )
    if not local_name:
        raise InvalidTopicName(f"topic name {name!r} has an empty local name")
    return TopicName(domain, tenant, namespace, local_name)
