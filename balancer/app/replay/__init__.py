"""Replay (issue 44): a recording through the stream's code and candidate policies.

`windows` runs the recorded stats messages through the stream's own code in batch (Spark),
`ours` steps the balancer's decision code on them, `engine` drives every policy over the
closed windows into a `balancer.core.replay.result.ReplayResult`.
"""
