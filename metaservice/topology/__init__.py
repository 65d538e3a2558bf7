"""The topology: the graph table → job → table formed by running jobs (pure code)."""
