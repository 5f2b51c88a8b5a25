"""Text models: defined here, once, to match the PyTorch runner's."""
