"""The asset graph, one module per layer."""
