"""fwbench runner for PyTorch."""
