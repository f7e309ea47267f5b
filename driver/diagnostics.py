"""The catalogue of error and warning codes, for `nkicc explain CODE`."""
from __future__ import annotations

CODES: dict[str, tuple[str, str]] = {
    "E001": ("Python error in the kernel body",
             "The kernel's own Python raised an exception while nkicc traced it. The message names the "
             "exception and the line in your file; nkicc's frames are left out because the mistake is in the "
             "kernel. Run the kernel's Python logic on plain values to debug it."),
    "E002": ("wrong arguments at call time",
             "A jit kernel was called with the wrong number of arguments, or with an array whose shape differs "
             "from the one it was compiled for. Non-array arguments are compile-time constants."),
    "E101": ("index out of bounds",
             "A slice, index or access pattern reaches outside its tensor for some iteration of the enclosing "
             "loops. nkicc checks every access over the whole loop range (it knows the trip counts), so the "
             "error names the first line whose access can leave the tensor. Reading past the end of an on-chip "
             "tile's free dimension is a warning (W101) instead: the hardware reads whatever lies next."),
    "E102": ("size depends on a loop index",
             "Tile shapes and slice sizes must be compile-time constants. Allocate the largest tile and slice "
             "it, or split the ragged end with min() so that each piece has a fixed size."),
    "E103": ("bad index, argument or pattern",
             "An argument has the wrong type (for example a float where an index is needed), or an access "
             "pattern is malformed ([step, num] pairs, num >= 1)."),
    "E104": ("bad kernel return value",
             "Kernels return HBM tensors created with nl.ndarray(..., buffer=nl.shared_hbm), or a tuple of them."),
    "E110": ("more than 128 partitions",
             "Dimension 0 of an SBUF or PSUM tensor is the partition dimension, at most 128. Tile it."),
    "E111": ("illegal partition start",
             "On-chip accesses start at partition 0 (65-128 partitions), 0 or 64 (33-64), or 0/32/64/96 (<= 32)."),
    "E120": ("wrong buffer for this instruction",
             "DMA cannot read or write PSUM; compute instructions read SBUF/PSUM, not HBM; tensor_tensor cannot "
             "read both inputs from PSUM; GpSimd cannot access PSUM."),
    "E130": ("matmul shape",
             "nc_matmul computes dst[M, N] (+)= stationary[K, M].T @ moving[K, N] with K <= 128, M <= 128, "
             "N <= 512; K is the partition dimension of both inputs."),
    "E131": ("matmul buffers", "nc_matmul reads stationary and moving from SBUF and writes PSUM."),
    "E132": ("matmul dtypes", "An fp32 or tfloat32 matmul operand needs an fp32/tfloat32 partner."),
    "E133": ("PSUM tile larger than a bank",
             "A PSUM tile must fit one 2 KiB bank per partition: at most 512 fp32 values."),
    "E140": ("shape mismatch",
             "Element-wise instructions pair partitions with partitions and free elements with free elements; "
             "both operands need the same partition count and number of free elements."),
    "E150": ("decision on a runtime loop index",
             "A dynamic_range index is a hardware register, known only at run time. Python cannot branch on it "
             "or use it to pick Python objects; use a static loop for that."),
    "E151": ("dynamic loop index used after its loop", "Copy the value into a tensor inside the loop."),
    "E160": ("not supported",
             "The operation, argument or dtype is not supported by nkicc yet, or is not NKI."),
    "E170": ("runtime access out of bounds",
             "During simulation an access with a runtime scalar offset left its tensor. The offset tensor was "
             "probably advanced too far; check the tensor_scalar that updates it."),
    "E180": ("trace did not settle",
             "The tracer splits a loop where a condition on its index changes and retries; a kernel that "
             "branches on indices in very many places can exhaust the retry limit."),
    "E200": ("kernel not found", "Name the kernel as FILE.py::KERNEL; the file must exist and define it."),
    "E201": ("bad command-line value", "See `nkicc COMMAND --help` for the expected forms."),
    "E202": ("unknown target", "Targets are trn1, trn2 and trn3 (and any a plugin registers)."),
    "E301": ("unknown pass", "`nkicc passes` lists every pass the installed plugins provide."),
    "E302": ("bad pass options", "See `nkicc compile --help`."),
    "E303": ("plugin module cannot be imported", "Install the plugin package or fix the module name."),
    "E304": ("two plugins declare the same pass", "Uninstall one, or disable it with --no-plugin NAME."),
    "E305": ("required pass disabled", "verify and the backend's required passes always run."),
    "E306": ("pass ordering cycle", "The after/before declarations of some passes contradict each other."),
    "E307": ("pass returned a non-Kernel", "A pass must return the IR it was given or a new Kernel."),
    "E310": ("a pass changed the result",
             "--verify-each ran the reference simulator on random inputs before the pipeline and after each "
             "pass; the named pass changed an output. Disable it and report it to its provider."),
    "E320": ("compile budget exceeded",
             "A pass ran past --max-compile-time or --max-compile-memory and was stopped (exit code 3) before it "
             "could exhaust the machine. Passes whose cost follows the unrolled program (unroll, "
             "global-schedule) are opt-in for this reason."),
    "W101": ("read past the end of a tile",
             "A slice reads beyond the end of an on-chip tile's free dimension. The hardware reads whatever "
             "lies next in the partition, so the values are undefined (the simulator reads them as NaN). It is "
             "harmless when those values never reach an output, as in the seed kernel's ragged last block."),
    "W201": ("matmul accumulates onto PSUM a copy or memset initialised",
             "On NeuronCore-v2/v3, accumulating nc_matmul results onto PSUM that a non-matmul instruction "
             "wrote is undefined; nkicc's simulator gives the sum. The psum-legalize pass (on by default) "
             "rewrites the copy-in / matmul / copy-out form into an overwriting matmul plus an add. For a "
             "zero-initialised accumulator, drop the memset: with accumulate=None the first matmul overwrites."),
}


def explain(code: str) -> str | None:
    if code not in CODES:
        return None
    title, story = CODES[code]
    return f"{code}: {title}\n\n{story}"
