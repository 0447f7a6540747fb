"""Inductor's door: every Triton kernel that torch.compile generated,
recorded at its launch in logged passes (seam.py, door.py; docs/kernels.md)."""
