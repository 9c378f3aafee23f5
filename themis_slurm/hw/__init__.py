"""Hardware probing on GPU nodes (NVML), kept apart from the Slurm parsers so those stay pure."""
