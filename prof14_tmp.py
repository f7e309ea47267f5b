import sys, time, cProfile, pstats
sys.path.insert(0, "bench"); sys.path.insert(0, "examples")
import numpy as np
import sim_throughput as st
import nkicc, fused_matmul as fm
from nkicc.api import resolve_target
from nkicc.passes import registry
from nkicc.simulator.machine import MachineSimulator
(M,K,N,L),(At,B,D) = st._scaled_inputs(8)
c = nkicc.compile(fm.mm2, f"float32[{K},{M}]", f"float32[{K},{N}]", f"float32[{N},{L}]", passes={"target":"trn2"})
t = resolve_target("trn2", registry())
inputs={"At":At,"B":B,"D":D}
timing = sys.argv[1] == "1"
sim = MachineSimulator(c.ir, t, timing=timing, batch=True)
t0=time.perf_counter(); sim.run(inputs); print("first", time.perf_counter()-t0)
for _ in range(3):
    t0=time.perf_counter(); sim.run(inputs); print("run", time.perf_counter()-t0)
t0=time.perf_counter(); (At.T@B)@D; print("numpy", time.perf_counter()-t0)
cProfile.run("sim.run(inputs)", "/tmp/prof.out")
pstats.Stats("/tmp/prof.out").sort_stats("cumtime").print_stats(30)
