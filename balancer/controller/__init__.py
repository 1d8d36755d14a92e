"""Adapter: the controller, the only code that acts on Pulsar.

It takes the detector's decisions and, in apply mode, splits bundles and triggers offloads
through the admin client, guarded by an allow/deny list, a durable journal, rate limits and a
circuit breaker per cluster, with every decision written to a JSON-lines audit log.
"""
