"""The kernel tier: humming's quantized GEMMs checked directly on a GPU, without a model or vLLM.

Modules, one concept each:

    cases      the suite: which layers (scheme x activation x shape) and batch sizes
    inputs     seeded, checkpoint-like weights, activations and MoE routing (numpy; same bytes
               for every humming version)
    reference  exact dequantisation, the modelled FP8 input quantizer, and the error metrics
    adapter    builds humming layers through humming's public API, per release (GPU side)
    timing     CUDA-event timing with an L2 flush, and the H200's measured ceilings (GPU side)
    probe      the worker process: runs cases, streams one JSON line per event
    watchdog   runs the worker, turns a hung case into a result, restarts on the next case
    record     the kernel record (same store and schema family as GSM8K records)
    judge      compares kernel records: per-case verdicts, exit code, Markdown and JSON

`compare` and `bisect --tier kernels` call `humming_matrix.kernels.judge.compare_kernel_records`.
"""
