"""Moving bundles between brokers: the pure decision (which bundle goes to which broker)."""
