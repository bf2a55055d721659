"""hpckit.slurm"""
