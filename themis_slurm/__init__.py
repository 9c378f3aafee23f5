"""themis-slurm: Themis finish-time-fair GPU scheduling for Slurm clusters.

Themis (Mahajan et al., "Themis: Fair and Efficient GPU Cluster Scheduling", NSDI 2020) gives every app
finish-time fairness rho = T_shared / T_independent through repeated partial-allocation auctions over
leased GPUs. This package holds the pure mechanism (`core`), baseline policies (`policies`), a trace-driven
simulator (`sim`), the Slurm adapter (`slurm`), the daemon (`daemon`) and the command line (`cli`).
"""

__version__ = "0.1.0"
