# Helpers that give every llmserve target the same shape:
#   llmserve_cc_library(NAME n [NO_UNITY] SRCS ... [HDRS ...] [DEPS ...]) -> library llmserve_n
#   llmserve_cc_binary(NAME n SRCS ... [DEPS ...] [OUTPUT_NAME o]) -> executable n
#   llmserve_cc_test(NAME n SRCS ... [DEPS ...] [LABELS ...] [TEST_FILTER f] [TEST_PREFIX p]
#                    [COMPUTE_HEAVY])                            -> gtest executable + ctest entries
#     (COMPUTE_HEAVY: the test's own code does heavy work; it stays at -O1 where test code is -O0)
#     (TEST_FILTER: a gtest filter on the cases that become ctest entries; TEST_PREFIX: put
#     before each entry's name, for a second binary of the same test source, whose names would
#     otherwise collide and share their ctest properties)
# Our own code builds with -Wall -Wextra -Werror; generated code (proto/) does not.

# Designated initializers leave the other fields at their defaults on purpose. GCC 12 reports a
# false free-nonheap-object when it inlines the destructor of an empty Abseil hash table (the
# shared empty-group sentinel is never freed). At -O3 (Release) GCC 12 also reports a false
# restrict overlap in std::string::insert (bug 105329) and false maybe-uninitialized strings
# inside moved structs (bug 107138); the -O2 builds that CI runs keep both checks.
set(LLMSERVE_WARNINGS -Wall -Wextra -Werror -Wno-missing-field-initializers)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  list(APPEND LLMSERVE_WARNINGS -Wno-free-nonheap-object)
  if(CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    list(APPEND LLMSERVE_WARNINGS $<$<CONFIG:Release>:-Wno-restrict>
         $<$<CONFIG:Release>:-Wno-maybe-uninitialized>)
  endif()
endif()

# ThreadSanitizer builds (LLMSERVE_SANITIZE=thread): every executable carries the annotations that
# make Debian's uninstrumented Abseil and gRPC's callback hand-offs visible to TSan
# (tests/tsan/absl_sync_annotations.cc and grpc_annotations.cc; docs/building.md,
# "ThreadSanitizer"). An object library, so that its definitions are in the executable itself and
# interpose on the shared libraries' own.
set(LLMSERVE_SANITIZER_SUPPORT "")
if(LLMSERVE_SANITIZE STREQUAL "thread")
  add_library(llmserve_tsan_absl OBJECT ${PROJECT_SOURCE_DIR}/tests/tsan/absl_sync_annotations.cc)
  target_link_libraries(llmserve_tsan_absl PUBLIC absl::synchronization absl::status absl::time
                                                  ${CMAKE_DL_LIBS})
  add_library(llmserve_tsan_grpc OBJECT ${PROJECT_SOURCE_DIR}/tests/tsan/grpc_annotations.cc)
  target_link_libraries(llmserve_tsan_grpc PUBLIC gRPC::grpc++ ${CMAKE_DL_LIBS})
  foreach(target llmserve_tsan_absl llmserve_tsan_grpc)
    target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR})
    target_compile_options(${target} PRIVATE ${LLMSERVE_WARNINGS})
  endforeach()
  set(LLMSERVE_SANITIZER_SUPPORT llmserve_tsan_absl llmserve_tsan_grpc)
endif()

# The concurrency-heavy tests that `make test-tsan` builds and runs under ThreadSanitizer say so
# where they are declared, with `LABELS tsan` (the engine thread, the worker service, the
# gateway's worker pool, HTTP server and request pipeline, the thread pool and limiters they
# share, the structured-output compiler and its shared mask cache, tool calls through both
# gateway APIs): llmserve_cc_test collects them in the global property LLMSERVE_TSAN_TARGETS,
# which tests/tsan's tsan_tests target builds. A renamed test keeps its label.

# Test code (the tests and fuzz harnesses, not the libraries they test) compiles at -O1 with line
# tables only: it is most of the project's translation units, inlining gtest's macros at -O2 with
# full debug information took about 40% longer, and nothing in it is measured for speed. Debug
# builds keep -O0 -g.
# The ASan tree (scripts/configure-sanitizer-build.sh) compiles test code at -O0: under clang's ASan
# and UBSan instrumentation that cuts a test file's compile time by a third to a half (25 s to 12 s
# for gguf_tokenizer_test), and most tests' own code does little of the work they run. A test whose
# own code does heavy work (random walks over real vocabularies, reference kernels, whole-file
# comparisons) says COMPUTE_HEAVY and stays at -O1: structured_test's suite took 203 s instead of
# 87 s at -O0, more than its compile time saved. So does a test that drives the libraries through
# much templated code: the linker keeps the test object's -O0 copy of an inline function or
# template both instantiate (std::string, nlohmann's parser), which the libraries' -O2 code then
# calls (docs/building.md, "Build time"). So do the fuzz harnesses (tests/fuzz).
set(LLMSERVE_TEST_CODE_OPTIMIZATION "-O1" CACHE STRING
    "Optimization level of test code (tests, fuzz harnesses) in RelWithDebInfo and Release builds")
set(LLMSERVE_TEST_CODE_FLAGS "$<$<CONFIG:RelWithDebInfo>:${LLMSERVE_TEST_CODE_OPTIMIZATION};-g1>"
                             "$<$<CONFIG:Release>:${LLMSERVE_TEST_CODE_OPTIMIZATION}>")
set(LLMSERVE_HEAVY_TEST_CODE_FLAGS "$<$<CONFIG:RelWithDebInfo>:-O1;-g1>" "$<$<CONFIG:Release>:-O1>")
if(NOT LLMSERVE_TEST_CODE_OPTIMIZATION MATCHES "^-O[0-3gs]$")
  message(FATAL_ERROR "LLMSERVE_TEST_CODE_OPTIMIZATION is '${LLMSERVE_TEST_CODE_OPTIMIZATION}': "
                      "expected one of -O0, -O1, -O2, -O3, -Og, -Os")
endif()

# Unity batches (LLMSERVE_UNITY_BUILD; docs/building.md, "Build time"), made here rather than with
# CMake's UNITY_BUILD: CMake 3.25 includes each file by its absolute path, so a clone in another
# directory (every CI run) missed every ccache entry. These include each file relative to the
# source root, found through the include path, which ccache's base_dir makes relative too.
# _llmserve_unity(target SOURCES...): batches of 8 of the target's .cc files (two or more) become
# its translation units; the files themselves are then compiled only through their batch.
set(LLMSERVE_UNITY_BATCH_SIZE 8)
function(_llmserve_unity target)
  set(files)
  foreach(source ${ARGN})
    if(source MATCHES "\\.cc$")
      get_filename_component(path ${source} ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
      list(APPEND files ${path})
    endif()
  endforeach()
  list(LENGTH files count)
  if(NOT LLMSERVE_UNITY_BUILD OR count LESS 2)
    return()
  endif()
  set(batch 0)
  set(in_batch 0)
  set(content "")
  set(batches)
  foreach(path ${files})
    file(RELATIVE_PATH relative ${PROJECT_SOURCE_DIR} ${path})
    string(APPEND content "#include \"${relative}\"\n")
    math(EXPR in_batch "${in_batch} + 1")
    if(in_batch EQUAL LLMSERVE_UNITY_BATCH_SIZE)
      set(out ${CMAKE_CURRENT_BINARY_DIR}/${target}_unity_${batch}.cc)
      file(CONFIGURE OUTPUT ${out} CONTENT "${content}" @ONLY)
      list(APPEND batches ${out})
      math(EXPR batch "${batch} + 1")
      set(in_batch 0)
      set(content "")
    endif()
  endforeach()
  if(in_batch GREATER 0)
    set(out ${CMAKE_CURRENT_BINARY_DIR}/${target}_unity_${batch}.cc)
    file(CONFIGURE OUTPUT ${out} CONTENT "${content}" @ONLY)
    list(APPEND batches ${out})
  endif()
  set_source_files_properties(${files} PROPERTIES HEADER_FILE_ONLY ON)
  target_sources(${target} PRIVATE ${batches})
endfunction()

function(_llmserve_common_target_settings target)
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${LLMSERVE_WARNINGS}>)
endfunction()

function(llmserve_cc_library)
  cmake_parse_arguments(ARG "NO_UNITY" "NAME" "SRCS;HDRS;DEPS" ${ARGN})
  set(target llmserve_${ARG_NAME})
  if(ARG_SRCS)
    add_library(${target} STATIC ${ARG_SRCS} ${ARG_HDRS})
    if(NOT ARG_NO_UNITY)
      _llmserve_unity(${target} ${ARG_SRCS})
    endif()
    _llmserve_common_target_settings(${target})
    target_link_libraries(${target} PUBLIC ${ARG_DEPS})
  else()
    add_library(${target} INTERFACE ${ARG_HDRS})
    target_include_directories(${target} INTERFACE ${PROJECT_SOURCE_DIR})
    target_link_libraries(${target} INTERFACE ${ARG_DEPS})
  endif()
endfunction()

function(llmserve_cc_binary)
  cmake_parse_arguments(ARG "" "NAME;OUTPUT_NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  _llmserve_unity(${ARG_NAME} ${ARG_SRCS})
  _llmserve_common_target_settings(${ARG_NAME})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} ${LLMSERVE_SANITIZER_SUPPORT})
  if(ARG_OUTPUT_NAME)
    set_target_properties(${ARG_NAME} PROPERTIES OUTPUT_NAME ${ARG_OUTPUT_NAME})
  endif()
  set_target_properties(${ARG_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
endfunction()

function(llmserve_cc_test)
  cmake_parse_arguments(ARG "COMPUTE_HEAVY" "NAME;TIMEOUT;TEST_FILTER;TEST_PREFIX"
                        "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  add_executable(${ARG_NAME} ${ARG_SRCS})
  _llmserve_unity(${ARG_NAME} ${ARG_SRCS})
  _llmserve_common_target_settings(${ARG_NAME})
  if(ARG_COMPUTE_HEAVY)
    target_compile_options(${ARG_NAME} PRIVATE ${LLMSERVE_HEAVY_TEST_CODE_FLAGS})
  else()
    target_compile_options(${ARG_NAME} PRIVATE ${LLMSERVE_TEST_CODE_FLAGS})
  endif()
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main
                                             ${LLMSERVE_SANITIZER_SUPPORT})
  set_target_properties(${ARG_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  # Discovery at ctest time keeps the build from running every test binary.
  set(properties TIMEOUT ${ARG_TIMEOUT})
  if("tsan" IN_LIST ARG_LABELS)
    set_property(GLOBAL APPEND PROPERTY LLMSERVE_TSAN_TARGETS ${ARG_NAME})
  endif()
  if(ARG_LABELS)
    list(APPEND properties LABELS "${ARG_LABELS}")
  endif()
  # Listing a test's cases loads every shared library it links; the CUDA tests map the 540 MB
  # libcublasLt, which took 6 s from a cold page cache and broke CI under the 5 s default.
  set(filter)
  if(ARG_TEST_FILTER)
    set(filter TEST_FILTER ${ARG_TEST_FILTER})
  endif()
  if(ARG_TEST_PREFIX)
    list(APPEND filter TEST_PREFIX ${ARG_TEST_PREFIX})
  endif()
  gtest_discover_tests(${ARG_NAME} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 120 ${filter}
                       PROPERTIES ${properties})
endfunction()
