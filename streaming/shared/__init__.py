"""What every stage reads and writes: row layouts, topic keys, event packs."""
