"""4. Spark: the job that wires the stages into a query, and Spark's plumbing around it."""
