# Fuzzing (tests/fuzz/): harnesses for every parser of untrusted input.
#
# In every build, each harness is also linked with a plain main (tests/fuzz/replay_main.c) and
# ctest replays the committed corpora through it: fuzz_replay_<target> runs every input of
# tests/fuzz/regressions/<target>/ (inputs that once crashed) and tests/fuzz/seeds/<target>/.
#
# -DPLLM_FUZZ=ON (clang only; the `fuzz` preset) also builds the libFuzzer binaries
# fuzz_<target> under ASan+UBSan, with the library compiled once more with coverage
# instrumentation (pllm_fuzz_core). tests/fuzz/run.sh builds and runs them.
option(PLLM_FUZZ "build the libFuzzer harnesses (clang; ASan+UBSan)" OFF)

set(PLLM_FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
set(PLLM_FUZZ_TARGETS gguf safetensors hf_config hf_dir records tokenizer tok_files chat io merge prefix_store)

foreach(t ${PLLM_FUZZ_TARGETS})
  add_executable(fuzz_replay_${t} ${PLLM_FUZZ_DIR}/fuzz_${t}.c ${PLLM_FUZZ_DIR}/fuzz_util.c ${PLLM_FUZZ_DIR}/replay_main.c)
  target_link_libraries(fuzz_replay_${t} PRIVATE pllm_core)
  set(_dirs)
  foreach(d regressions seeds)
    if(EXISTS ${PLLM_FUZZ_DIR}/${d}/${t})
      list(APPEND _dirs ${PLLM_FUZZ_DIR}/${d}/${t})
    endif()
  endforeach()
  if(_dirs)
    add_test(NAME fuzz_replay_${t} COMMAND fuzz_replay_${t} ${_dirs})
    # the tokenizer harness loads the default model's tokenizer
    if(t STREQUAL "tokenizer")
      set(_labels "model;fuzz")
    else()
      set(_labels "unit;fuzz")
    endif()
    set_tests_properties(fuzz_replay_${t} PROPERTIES LABELS "${_labels}" TIMEOUT 300)
  endif()
endforeach()

if(PLLM_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "PLLM_FUZZ=ON needs clang (libFuzzer): configure with -DCMAKE_C_COMPILER=clang "
                        "or the 'fuzz' preset")
  endif()
  set(_san -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g)
  file(GLOB _core CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/model/*.c ${CMAKE_SOURCE_DIR}/engine/*.c
       ${CMAKE_SOURCE_DIR}/tokenizer/*.c ${CMAKE_SOURCE_DIR}/datasets/*.c)
  add_library(pllm_fuzz_core STATIC ${_core})
  target_compile_options(pllm_fuzz_core PRIVATE -fsanitize=fuzzer-no-link ${_san})
  # the same third-party dependencies as the libraries of pllm_core, whatever they become
  set(_core_libs)
  foreach(_lib pllm_model pllm_tokenizer pllm_engine pllm_datasets)
    get_target_property(_libs ${_lib} LINK_LIBRARIES)
    list(APPEND _core_libs ${_libs})
  endforeach()
  list(REMOVE_ITEM _core_libs pllm_model pllm_tokenizer pllm_engine pllm_datasets)
  list(REMOVE_DUPLICATES _core_libs)
  target_link_libraries(pllm_fuzz_core PUBLIC ${_core_libs})
  add_custom_target(fuzz)
  foreach(t ${PLLM_FUZZ_TARGETS})
    add_executable(fuzz_${t} ${PLLM_FUZZ_DIR}/fuzz_${t}.c ${PLLM_FUZZ_DIR}/fuzz_util.c)
    target_compile_options(fuzz_${t} PRIVATE -fsanitize=fuzzer ${_san})
    target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer ${_san})
    target_link_libraries(fuzz_${t} PRIVATE pllm_fuzz_core)
    add_dependencies(fuzz fuzz_${t})
  endforeach()
endif()
