"""1. Read: the Kafka source and its read tasks (records -> validated events in packs)."""
