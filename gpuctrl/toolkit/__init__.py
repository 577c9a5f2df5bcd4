"""The container toolkit node agent: NVIDIA runtime configuration for containerd and CRI-O."""
