"""A Slurm cluster in Docker containers for the integration tests (see cluster.py)."""
