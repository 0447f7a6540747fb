"""tvm-ffi's door: every function of a module loaded through tvm-ffi
(SGLang's JIT kernels, FlashInfer's) recorded when called in a logged pass
(seam.py, door.py; docs/kernels.md)."""
