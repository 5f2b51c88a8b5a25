"""fwbench runner for JAX."""
