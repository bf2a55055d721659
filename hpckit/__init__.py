"""hpckit: stand up and run Slurm GPU clusters."""

__version__ = "0.1.0"
