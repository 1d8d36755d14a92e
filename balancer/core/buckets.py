"""Topic buckets (PIP-157): which metadata bucket a topic's managed ledger lives under.

PIP-157 proposes `/managed-ledgers/{tenant}/{ns}/{domain}/${bucket}/{local-name}` with
`bucket = abs(hashCode) % numberOfTopicBuckets`, the number chosen at namespace creation and
never changed; buckets are unrelated to bundles. Pulsar never shipped it (the implementation
PR was closed), so the decisions below are ours, taken to match the proposal:

- The text hashed is the topic's *local name* (`orders-partition-3`, each partition by its
  own), not the full name: this reproduces the PIP's worked example exactly (3 buckets:
  ptopic-partition-0 and -3 in $0, nptopic2 and ptopic-partition-1 in $1, nptopic1 and
  ptopic-partition-2 in $2), the full name does not.
- The hash is Java's `String.hashCode`: `s[0]*31^(n-1) + ... + s[n-1]` over UTF-16 code units
  (a character outside the BMP counts as its two surrogates), wrapping signed 32-bit.
- `Integer.MIN_VALUE`: Java's `Math.abs(Integer.MIN_VALUE)` is still `-2^31`, and Java's `%`
  keeps the dividend's sign, so a literal port gives `-(2^31 % n)`: a negative bucket (e.g.
  -2 for n = 3; 0 when n is a power of two), which names no valid `$bucket`. We take the
  true absolute value instead, `2^31 % n`. It differs from the literal port only for names
  whose hash is exactly MIN_VALUE (e.g. "polygenelubricants"), and only when n is not a power
  of two; `java_abs_mod` gives the literal value for comparison.
- `numberOfTopicBuckets = 1` (the PIP's default) means no bucketing: the path has no `$bucket`
  level. Non-persistent topics have no managed ledger, hence no metadata path (None).
- The local name in the path is encoded as Pulsar's persistence naming does
  (`URLEncoder.encode(localName, UTF-8)`).

Purely computational, with no side effects.
"""

from __future__ import annotations

from urllib.parse import quote_plus

from balancer.core.topics import TopicDomain, TopicName, parse_topic

INT_MIN = -(2**31)


def java_string_hash_code(text: str) -> int:
    """Java's `String.hashCode()`: over UTF-16 code units, wrapping signed 32-bit."""
    units = text.encode("utf-16-le")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] | units[i + 1] << 8)) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def java_abs_mod(value: int, modulus: int) -> int:
    """Java's `Math.abs(value) % modulus` for an int value, MIN_VALUE quirk included."""
    magnitude = -value if value < 0 and value != INT_MIN else value
    # Java's % truncates towards zero: the result has the sign of the dividend.
    remainder = abs(magnitude) % modulus
    return -remainder if magnitude < 0 else remainder


def topic_bucket(topic: TopicName | str, num_buckets: int) -> int:
    """The bucket in [0, num_buckets) of a topic's local name (see the module doc)."""
    if isinstance(num_buckets, bool) or not isinstance(num_buckets, int) or num_buckets < 1:
        raise ValueError(f"number of topic buckets must be an integer >= 1, got {num_buckets!r}")
    name = topic if isinstance(topic, TopicName) else parse_topic(topic)
    return abs(java_string_hash_code(name.local_name)) % num_buckets


def encode_local_name(local_name: str) -> str:
    """Java's `URLEncoder.encode(s, UTF-8)`: keeps letters, digits and `.-*_`; space -> `+`."""
    return quote_plus(local_name, safe="*").replace("~", "%7E")


def metadata_path(topic: TopicName | str, num_buckets: int) -> str | None:
    """The managed-ledger metadata path; None for a non-persistent topic."""
    name = topic if isinstance(topic, TopicName) else parse_topic(topic)
    bucket = topic_bucket(name, num_buckets)
    if name.domain is not TopicDomain.PERSISTENT:
        return None
    head = f"/managed-ledgers/{name.tenant}/{name.namespace}/{name.domain.value}"
    local = encode_local_name(name.local_name)
    if num_buckets == 1:
        return f"{head}/{local}"
    return f"{head}/${bucket}/{local}"
