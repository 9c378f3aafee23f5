"""slurm package."""
