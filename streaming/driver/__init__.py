"""3. Driver: the foreachBatch step (closed windows -> bundles -> `BatchReport`)."""
