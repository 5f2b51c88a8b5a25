"""fwbench runner for TensorFlow."""
