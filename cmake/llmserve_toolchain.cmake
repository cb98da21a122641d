# Compiler launcher, sanitizers and the optional CUDA language.

find_program(LLMSERVE_CCACHE ccache)
if(LLMSERVE_CCACHE)
  set(CMAKE_C_COMPILER_LAUNCHER ${LLMSERVE_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${LLMSERVE_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${LLMSERVE_CCACHE})
endif()

if(LLMSERVE_SANITIZE)
  if(NOT LLMSERVE_SANITIZE MATCHES "^(address|undefined|address,undefined|undefined,address|thread)$")
    message(FATAL_ERROR "LLMSERVE_SANITIZE='${LLMSERVE_SANITIZE}': expected 'address,undefined', "
                        "'address', 'undefined' or 'thread'")
  endif()
  add_compile_options(-fsanitize=${LLMSERVE_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${LLMSERVE_SANITIZE})
endif()

# lld links 3 to 5 times faster than GNU ld (0.3-0.5 s against 1.6 s for a test binary here), and
# linking about 170 executables is most of a build whose objects all come from ccache. Used
# wherever the compiler can drive it; only C++-linked targets (nvcc does not take -fuse-ld).
option(LLMSERVE_USE_LLD "link with lld where the compiler supports -fuse-ld=lld" ON)
if(LLMSERVE_USE_LLD)
  include(CheckLinkerFlag)
  check_linker_flag(CXX "-fuse-ld=lld" LLMSERVE_HAVE_LLD)
  if(LLMSERVE_HAVE_LLD)
    add_link_options("$<$<LINK_LANGUAGE:CXX>:-fuse-ld=lld>")
  endif()
endif()
if(LLMSERVE_HAVE_LLD)
  message(STATUS "llmserve: linking with lld")
else()
  message(STATUS "llmserve: linking with the compiler's default linker")
endif()

# CUDA: AUTO turns it on when a CUDA compiler is found. Everything but worker/engine/cuda builds
# without it.
set(LLMSERVE_HAVE_CUDA OFF)
if(NOT LLMSERVE_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "LLMSERVE_CUDA='${LLMSERVE_CUDA}': expected AUTO, ON or OFF")
endif()
if(NOT LLMSERVE_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES "80;90a")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(LLMSERVE_HAVE_CUDA ON)
  elseif(LLMSERVE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "LLMSERVE_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER)")
  endif()
endif()
message(STATUS "llmserve: CUDA backend ${LLMSERVE_HAVE_CUDA}")
