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
    "E003": ("assertion failed in the kernel",
             "The kernel's own check (`assert cond, message`, or a helper built on it such as kernel_assert) "
             "failed while nkicc traced it: the arguments are outside what the kernel supports. The message is "
             "the kernel's; the location is the line that made the check (the caller of an assert-only helper). "
             "Change the shapes, dtypes or options to ones the kernel documents."),
    "E101": ("index out of bounds",
             "A slice, index or access pattern reaches outside its tensor for some iteration of the enclosing "
             "loops. nkicc checks every access over the whole loop range (it knows the trip counts), so the "
             "error names the first line whose access can leave the tensor. Reading past the end of an on-chip "
             "tile's free dimension is a warning (W101) instead: the hardware reads whatever lies next."),
    "E102": ("size depends on a hardware loop's index",
             "A dynamic_range loop runs one instruction stream on the device, so its tile shapes and slice "
             "sizes cannot move with its index. Allocate the largest tile and slice it, or split the ragged "
             "end off with min() so that each piece has a fixed size. (A static loop's index may move a size: "
             "NKI's static loops are Python ranges, and nkicc traces such a loop concretely.)"),
    "E103": ("bad index, argument or pattern",
             "An argument has the wrong type (for example a float where an index is needed), or an access "
             "pattern is malformed ([step, num] pairs, num >= 1)."),
    "E104": ("bad kernel return value",
             "Kernels return HBM tensors created with nl.ndarray(..., buffer=nl.shared_hbm), or output "
             "arguments the caller passed in (whole), or a tuple of them."),
    "E110": ("more than 128 partitions",
             "Dimension 0 of an SBUF or PSUM tensor is the partition dimension, at most 128. Tile it."),
    "E111": ("illegal partition start",
             "Compute instructions access SBUF/PSUM starting at partition 0 (65-128 partitions), 0 or 64 (33-64), "
             "or 0/32/64/96 (<= 32). DMA (dma_copy, nl.load, nl.store) may start at any partition."),
    "E120": ("wrong buffer for this instruction",
             "DMA cannot read or write PSUM; compute instructions read SBUF/PSUM, not HBM; tensor_tensor cannot "
             "read both inputs from PSUM; GpSimd cannot access PSUM."),
    "E130": ("instruction shape limit",
             "An instruction's operand is outside the sizes it takes: nc_matmul computes dst[M, N] (+)= "
             "stationary[K, M].T @ moving[K, N] with K, M <= 128 and N <= 512; transposes, local_gather, topk, "
             "dma_transpose and the other instructions have their own limits on elements per partition and "
             "dimensions, given in the message. Tile the operand to fit."),
    "E131": ("matmul buffers", "nc_matmul reads stationary and moving from SBUF and writes PSUM."),
    "E132": ("operand dtype not allowed",
             "An instruction got an operand of a dtype it does not take, or two operands whose dtypes must "
             "agree do not. The message names the allowed dtypes. For example the Tensor Engine multiplies "
             "fp8 (e4m3, e5m2), bf16, fp16, tfloat32 and fp32, not integers, and an fp32 operand needs an "
             "fp32/tfloat32 partner; nisa.rng writes integers only. Cast with nisa.tensor_copy first."),
    "E133": ("PSUM tile larger than a bank",
             "A PSUM tile must fit one 2 KiB bank per partition: at most 512 fp32 values. On NeuronCore-v4 "
             "(trn3) a tile may span the 8 banks (a matmul writes up to 4096 fp32 or 8192 bf16 values)."),
    "E134": ("too many elements for one instruction",
             "An engine instruction reads or writes at most 64 Ki elements per partition from SBUF and 4 Ki "
             "from PSUM. Split the free dimension and issue one instruction per piece."),
    "E135": ("not on this NeuronCore generation",
             "The instruction, operator, argument value or dtype exists only on newer NeuronCores, as the API "
             "reference documents it (for example nisa.nc_matmul_mx, nisa.quantize_mx, nisa.activate2, "
             "nisa.exponential, nisa.rand2, nl.abs_max and NkiTensor.indirect on NeuronCore-v4 (trn3); "
             "nisa.dma_transpose, nisa.range_select, nisa.nonzero_with_count, nisa.core_barrier and "
             "nisa.sendrecv on NeuronCore-v3 (trn2) and newer; a DMA priority on v4). The kernel is traced for "
             "the generation of its --target. Compile for a newer target, or branch on nisa.get_nc_version() "
             "so that each generation gets code it has."),
    "E140": ("shape mismatch",
             "Element-wise instructions pair partitions with partitions and free elements with free elements; "
             "both operands need the same partition count and number of free elements."),
    "E150": ("decision on a runtime loop index",
             "A dynamic_range index is a hardware register, known only at run time. Python cannot branch on it "
             "or use it to pick Python objects; use a static loop for that."),
    "E151": ("dynamic loop index used after its loop", "Copy the value into a tensor inside the loop."),
    "E160": ("not supported",
             "The operation, argument or dtype is not supported by nkicc yet, or is not NKI. This includes "
             "importing such a name (`from nki.isa import X`, `import nki.isa.X`): the error names the import."),
    "E161": ("an NKI 0.1 form nkicc cannot run",
             "The kernel is written in NKI 0.1 (`import neuronxcc.nki`), which nkicc runs as written "
             "(docs/dialects.md), but this form has no counterpart in nkicc: a mask= that is not a box (two grid "
             "axes compared with each other), an index grid that is not affine (`//`, `%`, a product of two "
             "indices), a partition index that moves along a free grid axis, a tensor with block dimensions "
             "used whole, nisa.dma_copy(dst_rmw_op=), nl.loop_reduce's result not assigned into its "
             "accumulator. The message names the section of the vendor's migration guide that rewrites it and "
             "the `nkicc migrate` rule (M0204, ...) that applies that rewrite."),
    "E170": ("runtime access out of bounds",
             "During simulation an access with a runtime scalar offset left its tensor. The offset tensor was "
             "probably advanced too far; check the tensor_scalar that updates it."),
    "E171": ("hazard between engines (machine simulator)",
             "The machine simulator saw an instruction read or overwrite memory before another engine's "
             "instruction on it finished: a semaphore the schedule should have inserted is missing. This is a "
             "bug in the schedule pass (or a plugin's), not in the kernel."),
    "E172": ("program not lowered or does not fit (machine simulator)",
             "The machine simulator runs lowered programs: every on-chip tensor needs an address inside the "
             "target's SBUF/PSUM. Compile with the alloc pass (nkicc.compile does), or use the reference "
             "simulator."),
    "E173": ("an output depends on never-written memory",
             "While the kernel ran, an instruction read on-chip (or HBM scratch) memory that nothing had "
             "written, and those values reached an output. On the device that memory holds whatever was there "
             "before, so the output is garbage. nkicc fills new memory with poison (NaN, or 4 for ints, as the "
             "vendor's simulator does) and, when an output holds poison, runs the kernel again with another "
             "poison: outputs that change are reported, with the first instruction that read unwritten memory. "
             "Zero the tile (nl.zeros, nisa.memset) or read only what was written. Reads that never reach an "
             "output are not reported. Where those elements are meant to be undefined (a kernel that documents "
             "only part of its output), `@nkicc.jit(undefined=\"poison\")`, NKICC_UNDEFINED=poison or "
             "`--undefined poison` on `nkicc run` and `nkicc simulate` returns the output holding the poison "
             "there (NaN, or 4 for ints), as the vendor's simulator does, instead of this error."),
    "E174": ("output elements never written",
             "Some elements of a returned tensor were never stored to; on the device they hold whatever was in "
             "HBM. Store every element of each output (check the loop trip counts and the ragged last tile)."),
    "E180": ("trace did not settle",
             "The tracer splits a loop where a condition on its index changes and retries; a kernel that "
             "branches on indices in very many places can exhaust the retry limit."),
    "E191": ("ranks disagree at a collective",
             "In a multi-rank simulation (nkicc.run_ranks, a kernel[2] launch whose programs meet) every rank "
             "of a replica group must make the same collective calls in the same order. nkicc names the two "
             "calls that differ, a rank that is in no group, or a rank that finished while others waited."),
    "E190": ("loop-carried dependence in an affine_range loop",
             "NKI may run the iterations of an affine_range loop in any order, or overlapped, so no iteration "
             "may read or overwrite what another iteration writes. nkicc looks for two different iterations "
             "that touch the same element of a tensor made outside the loop, with at least one write, at "
             "addresses that move with the loop index, and reports only a concrete pair it found. Two forms "
             "of reuse stay legal: an accumulator at the same elements in every iteration (acc = acc + x) and "
             "matmul accumulation into PSUM. Use nl.sequential_range (or range / static_range) for a loop "
             "that passes values from one iteration to the next. Loops that nkicc traces iteration by "
             "iteration (see `nkicc compile` loop counts) are not checked. A dependence that cannot change the "
             "result in any order is a warning instead (W190)."),
    "E200": ("kernel not found", "Name the kernel as FILE.py::KERNEL; the file must exist and define it."),
    "E201": ("bad command-line value", "See `nkicc COMMAND --help` for the expected forms."),
    "E202": ("unknown target", "Targets are trn1, trn2 and trn3 (and any a plugin registers)."),
    "E203": ("not an nkicc program file",
             "The file is not a program written by `nkicc compile --emit program`, or was written by a "
             "different version of the program format."),
    "E204": ("not an nkicc reproducer",
             "`nkicc reproduce` replays files nkicc wrote when a pass crashed (nkicc-repro-*.json)."),
    "E205": ("cannot write an output file",
             "A file nkicc was asked to write (--report, -o/--output, --sim-json, --trace) could not be "
             "opened or written: the folder must exist and be writable."),
    "E206": ("an optional extra is not installed, or there is nothing to draw",
             "The engine timeline picture (`--timeline t.png`, SimReport.plot, CompiledKernel.plot_timeline, "
             "a report shown in a notebook) is drawn with matplotlib, an optional extra: pip install "
             "'nkicc[plot]'. It draws a simulation that kept a trace: the machine simulator with timing on, "
             "run with trace=True or a trace path (the command line's --timeline does that)."),
    "E215": ("the migrated kernel differs from the original",
             "`nkicc migrate --check` compiled and simulated the kernel as written and as migrated, on the same "
             "random inputs, and an output differs (beyond the output dtype's rounding where the guide "
             "documents a numerics change between the versions). A rule's rewrite changed the meaning: read "
             "the diff, and the `# nkicc-migrate:` comments, which mark what was left to you."),
    "E210": ("the Dask cluster cannot be used",
             "`nkicc tune` and `nkicc run --shards` with --cluster tcp://HOST:PORT connect to an existing Dask "
             "scheduler; it did not answer within 10 s, or had no workers within 30 s. Start one with `dask "
             "scheduler` and workers with `dask worker tcp://HOST:PORT`, or leave --cluster out to run on local "
             "worker processes. See docs/scale-out.md."),
    "E211": ("a variant or shard timed out",
             "It ran longer than --timeout seconds; its process (and everything it started) was killed and it "
             "is one failed row. The rest of the sweep goes on. Raise --timeout, or make the variant smaller."),
    "E212": ("the process running a variant or shard died",
             "The Dask worker running it died (killed, out of memory, or crashed), on every try: a task whose "
             "worker dies is run once more on another worker, and fails when that one dies too. Or the "
             "variant's own process was killed by a signal. It is one failed row; the rest of the sweep goes "
             "on. The worker's log says more; a variant that needs more memory than a worker has kills it."),
    "E301": ("unknown pass", "`nkicc passes` lists every pass the installed plugins provide."),
    "E302": ("bad pass options", "See `nkicc compile --help`."),
    "E303": ("plugin module cannot be imported",
             "-p takes an import name (pkg.devpass; the current folder is not on the import path, add it to "
             "PYTHONPATH) or a plugin file (-p ./devpass.py). Install the plugin package or fix the name."),
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
    "E400": ("the kernel does not fit on the chip",
             "The allocator could not place every live on-chip tensor in SBUF/PSUM of the target, even after "
             "spilling. Use smaller tiles, fewer live tiles at once, or a target with more SBUF."),
    "E900": ("malformed IR (internal)",
             "A pass produced IR that refers to a tensor it does not declare, or asked for something the IR "
             "cannot express. This is a bug in nkicc or in a pass plugin."),
    "E999": ("a pass crashed (internal error, exit code 4)",
             "A pass raised an exception that is not a diagnostic: a bug in nkicc or in the plugin that "
             "provides the pass, not in the kernel. nkicc writes a reproducer (nkicc-repro-KERNEL-HASH.json, in "
             "the current folder or the temp folder) holding the IR the pass was given, the options and the "
             "pipeline; `nkicc reproduce FILE` replays it without the kernel's source. --disable-pass NAME "
             "may get you going. Other internal errors print nkicc's traceback, also with exit code 4."),
    "W501": ("compile cache unavailable or misconfigured",
             "The compile cache could not be used as configured (an unreadable NKICC_CACHE_SIZE, a cache folder "
             "that cannot be written, a damaged entry). nkicc goes on without it or with the default; results "
             "are unaffected, only repeated compiles are slower. `nkicc cache --help` shows the cache's "
             "commands."),
    "W502": ("shared cache tier unavailable",
             "The shared cache tier behind the local one (NKICC_REMOTE_CACHE or --remote-cache, e.g. a Redis "
             "server) failed: refused or timed-out connection, wrong password, a scheme no plugin serves, or a "
             "secret key file that cannot be read. nkicc warns once and goes on with the local cache (a failed "
             "server is tried again once a minute); results are unaffected. Check the server and the URL (docs/scale-out.md); "
             "`nkicc cache stats` shows both tiers."),
    "W101": ("read past the end of a tile",
             "A slice reads beyond the end of an on-chip tile's free dimension. The hardware reads whatever "
             "lies next in the partition, so the values are undefined (the simulator reads them as NaN). It is "
             "harmless when those values never reach an output, as in the seed kernel's ragged last block."),
    "W150": ("nl.dynamic_range is deprecated",
             "NKI 0.6 replaces `for i in nl.dynamic_range(...)` with nl.fori_loop(lower, upper, body) and "
             "nl.while_loop(init, body); dynamic_range still works and warns, as the vendor's compiler does. "
             "docs/loops.md shows the migration."),
    "W104": ("the kernel returns nothing",
             "A kernel's results are the nl.shared_hbm tensors it returns. One that returns nothing (no return "
             "statement, or `return None`) has no result: every instruction is dead, dce removes it, and a call "
             "returns None. It is a warning rather than an error because such a kernel is legal NKI and often a "
             "kernel in the middle of being written; add `return out`."),
    "W161": ("NKI 0.1 direct allocation: nkicc places the tiles",
             "An NKI 0.1 kernel places tiles by hand (`buffer=nki.compiler.sbuf.mod_alloc(...)`, "
             "`psum.mod_alloc`, `alloc`). The vendor's compiler orders instructions on hand-placed tiles by "
             "their addresses, so two tensors placed on one address still compute what the program says "
             "in order; nkicc's alloc pass places those tiles itself instead, with the same values. The "
             "timing estimate is for nkicc's placement, not the hand-placed one. `nkicc migrate` marks "
             "these calls (M0210, the guide's direct-allocation section); drop the buffer= argument to "
             "silence it."),
    "W190": ("a dependence in an affine_range loop that no order changes",
             "Two iterations of an affine_range loop touch the same element, one writing it, but every such "
             "write leaves the element as it is in any order: a copy of the element onto itself (a "
             "tensor_copy, a dma_copy between equal dtypes or an nc_stream_shuffle whose source for that "
             "element is the element itself; a row broadcast from partition 0 of a tile into the tile's four "
             "quadrants rewrites partition 0 with its own value), or two memsets of one value. The vendor's "
             "compiler builds such loops; nkicc runs the loop in program order, as nl.sequential_range would, "
             "so the result is the one every order gives. Any other dependence stays E190. docs/loops.md says "
             "where the line is drawn. Write nl.sequential_range to silence it."),
    "W191": ("every program of a launch writes the same elements of a shared tensor",
             "In a launch grid (kernel[2](...)), a write to an argument or an nl.shared_hbm tensor whose address "
             "does not depend on nl.program_id is made by every program to the same elements, and the kernel "
             "writes that tensor elsewhere too (each program fills the whole output, then stores its own rows). "
             "Which program writes last is the cores' timing, which no order of whole programs gives: cores that "
             "start together all fill before any of them stores. nkicc runs such a launch's programs side by "
             "side, one top-level statement of each in turn, and warns. Give each program its own part of the "
             "tensor (index it by nl.program_id), or have one program write it. docs/guide.md, SPMD launches."),
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
