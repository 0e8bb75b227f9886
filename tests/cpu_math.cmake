# The CPU numerics choice (--cpu-math) end to end on the real default model.
pllm_add_py_test(cpu_math_cli cpu_math_cli.py LABELS model)
