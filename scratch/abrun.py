import runpy, sys
import metrale.cuda.w8a8 as w
w.SILU_QUANT_CLUSTER = sys.argv.pop(1) == "1"
sys.argv[0] = "metrale.bench"
runpy.run_module("metrale.bench", run_name="__main__", alter_sys=True)
