"""Replay (issue 44): a recorded stream of a cluster's stats run through candidate policies.

The pure parts live here: what a replay produces (`result`), the simulated layout each
policy changes, and the models of Pulsar's own policies. Reading recordings, Spark and the
command live in `balancer.app.replay`; drawing the report in `balancer.ops.replay_report`.
"""
