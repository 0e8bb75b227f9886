# engine: block pool, KV manager, scheduler and engine loop (with a deterministic fake backend).
pllm_add_c_test(engine_block_pool SOURCES engine_block_pool.c LABELS unit)
pllm_add_c_test(engine_kv_manager SOURCES engine_kv_manager.c LABELS unit)
pllm_add_c_test(engine_sched_random SOURCES engine_sched_random.c engine_fake_backend.c LABELS unit)
pllm_add_c_test(engine_loop SOURCES engine_loop.c engine_fake_backend.c LABELS unit)
pllm_add_c_test(engine_cpu_model SOURCES engine_cpu_model.c LABELS model)
pllm_add_c_test(engine_prefix_store SOURCES engine_prefix_store.c LABELS unit)
pllm_add_c_test(engine_prefix_tier SOURCES engine_prefix_tier.c LABELS model)
# speculative decoding: proposers, policy, lossless greedy and sampled output, a chi-square test
pllm_add_c_test(engine_spec SOURCES engine_spec.c LABELS unit)
# one step in flight vs synchronous stepping (random model, the default model's tokenizer)
pllm_add_c_test(engine_overlap SOURCES engine_overlap.c LABELS model)
pllm_add_c_test(engine_spec_model SOURCES engine_spec_model.c LABELS model)
# the hybrid KV layout (sliding-window layers' own pool) against keeping everything, on the CPU
pllm_add_c_test(engine_hybrid_kv SOURCES engine_hybrid_kv.c LABELS unit)
