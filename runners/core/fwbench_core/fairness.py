"""The settings a fair comparison needs equal in every backend: each backend reads them here, none keeps its own
(`tests/test_fairness_facts.py` checks)."""

# The training step's optimizer: SGD with momentum.
LEARNING_RATE = 0.01
MOMENTUM = 0.9
# Parity with a reference, on max |output - reference| / max |reference| over the whole output: fp32 through two
# different kernel libraries agrees to about 1e-6 per layer.
REFERENCE_TOLERANCE = 1e-4
