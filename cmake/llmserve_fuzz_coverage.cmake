# In the libFuzzer tree (LLMSERVE_FUZZ=ON, build-fuzz, which make test-sanitize shares), the
# coverage instrumentation that -fsanitize=fuzzer-no-link puts in every file is needed only in
# the code a fuzz target links: elsewhere it guides no fuzzer and slows every test. The comparison
# tracing alone made the CPU-bound tests about 1.4 to 1.9 times slower under ASan (JSON-schema,
# regex and matcher walks), and the end-to-end tests spend their time in the engine and CPU
# kernels, which no fuzz target reaches. llmserve_limit_coverage_to_fuzzed_code() therefore turns
# it off for every target outside the link closure of the fuzz targets; a library that a fuzz
# target comes to link is instrumented again without anyone having to remember it.

# Every buildsystem target defined in `dir` and below, into `out_var`.
function(_llmserve_all_targets dir out_var)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(subdir ${subdirs})
    _llmserve_all_targets(${subdir} sub_targets)
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out_var} ${targets} PARENT_SCOPE)
endfunction()

# Adds `target` and the project targets it links, directly or through others, to the global
# property LLMSERVE_FUZZ_CLOSURE.
function(_llmserve_add_link_closure target)
  get_property(seen GLOBAL PROPERTY LLMSERVE_FUZZ_CLOSURE)
  if(target IN_LIST seen)
    return()
  endif()
  set_property(GLOBAL APPEND PROPERTY LLMSERVE_FUZZ_CLOSURE ${target})
  get_target_property(type ${target} TYPE)
  set(deps)
  if(NOT type STREQUAL "INTERFACE_LIBRARY")
    get_target_property(direct ${target} LINK_LIBRARIES)
    if(direct)
      list(APPEND deps ${direct})
    endif()
  endif()
  get_target_property(interface ${target} INTERFACE_LINK_LIBRARIES)
  if(interface)
    list(APPEND deps ${interface})
  endif()
  foreach(dep ${deps})
    # $<LINK_ONLY:x> (static libraries' private dependencies) names x too.
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" dep "${dep}")
    if(TARGET ${dep})
      get_target_property(imported ${dep} IMPORTED)
      if(NOT imported)
        _llmserve_add_link_closure(${dep})
      endif()
    endif()
  endforeach()
endfunction()

function(llmserve_limit_coverage_to_fuzzed_code)
  get_property(fuzz_targets GLOBAL PROPERTY LLMSERVE_FUZZ_TARGETS)
  if(NOT fuzz_targets)
    message(FATAL_ERROR "LLMSERVE_FUZZ=ON but no fuzz target was defined")
  endif()
  foreach(target ${fuzz_targets})
    _llmserve_add_link_closure(${target})
  endforeach()
  get_property(closure GLOBAL PROPERTY LLMSERVE_FUZZ_CLOSURE)
  _llmserve_all_targets(${PROJECT_SOURCE_DIR} all_targets)
  set(uninstrumented 0)
  set(compiled "^(STATIC_LIBRARY|OBJECT_LIBRARY|EXECUTABLE|MODULE_LIBRARY|SHARED_LIBRARY)$")
  foreach(target ${all_targets})
    get_target_property(type ${target} TYPE)
    if(target IN_LIST closure OR NOT type MATCHES "${compiled}")
      continue()
    endif()
    target_compile_options(${target} PRIVATE
      -fno-sanitize-coverage=inline-8bit-counters,indirect-calls,trace-cmp,pc-table)
    math(EXPR uninstrumented "${uninstrumented} + 1")
  endforeach()
  list(LENGTH closure instrumented)
  message(STATUS "Fuzzing coverage: on in ${instrumented} targets (the fuzz targets and what "
                 "they link), off in ${uninstrumented}")
endfunction()
