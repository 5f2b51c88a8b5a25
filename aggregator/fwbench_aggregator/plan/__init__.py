"""The plan stage: what to run. One run as a RunSpec, a study as a grid of Configurations (from a sweep file or
the command line, validated here), the store key of a run, and the bracket search of max-batch and serve-capacity."""
