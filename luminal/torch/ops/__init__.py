"""ATen op handlers by family; each module registers its ops in luminal/torch/registry.py."""
