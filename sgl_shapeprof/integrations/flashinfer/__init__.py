"""FlashInfer's door: every public API call (its `flashinfer_api` decorator)
recorded in logged passes (seam.py, door.py; docs/kernels.md)."""
