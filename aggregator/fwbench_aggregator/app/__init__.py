"""Use cases: compare, calibrate, study (sweep), max-batch, parity, models, report, and a study on Slurm. The
command line and the Slurm job call them; they return results and never print (progress goes through
base.progress.Progress)."""
