# The pllm binary end to end on the real default model.
pllm_add_py_test(generate_e2e generate_e2e.py LABELS model)
set_tests_properties(generate_e2e PROPERTIES TIMEOUT 900)
