"""The Slurm adapter. Read side (pure, no subprocess): `hostlist`, `ranges`, `gres` (GRES/TRES strings),
`gres_conf`, `topology_conf`, `records` (SlurmJob, SlurmNode), `parse` (squeue/sinfo --json),
`scontrol` (Key=Val fallback), `openapi` (version-tolerant JSON accessors), `errors`."""
