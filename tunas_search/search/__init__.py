"""The search: one TuNAS step (model_fn), its parts, the job that runs it."""
