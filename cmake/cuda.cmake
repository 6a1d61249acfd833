# CUDA backend kernels (included from the top-level CMakeLists.txt when -DLMFUSE_CUDA=ON).
# sm_90 machine code for Hopper plus compute_90 PTX so newer GPUs can JIT it.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES "90-real;90-virtual")
endif()
enable_language(CUDA)
# CMake 3.25 does not know nvcc 13's C++20 flag; tell it (the project is C++20 throughout).
set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_EXTENSIONS OFF)
find_package(CUDAToolkit REQUIRED)

file(GLOB cuda_srcs CONFIGURE_DEPENDS
  ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cu ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cpp)
add_library(lmfuse_backend_cuda STATIC ${cuda_srcs})
target_include_directories(lmfuse_backend_cuda PUBLIC ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include)
target_link_libraries(lmfuse_backend_cuda PUBLIC CUDA::cudart CUDA::cublas CUDA::cublasLt lmfuse_format)
# The top-level -Wall etc. are host-compiler flags; hand them to nvcc's host pass only.
target_compile_options(lmfuse_backend_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo -Xptxas=-warn-spills>)
set_target_properties(lmfuse_backend_cuda PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)

# Op tests without GoogleTest (the GPU machine has none): the same tests/ops/cuda_*.cpp sources
# as test_cuda_ops, built against the small harness in tests/ops/cuda_test.h.
file(GLOB cuda_op_test_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/ops/cuda_*.cpp)
if(cuda_op_test_srcs)
  add_executable(cuda_op_tests ${cuda_op_test_srcs})
  # lmfuse_core for the tests that run whole models through a Session (cuda_generator_test).
  target_link_libraries(cuda_op_tests PRIVATE lmfuse_core lmfuse_backend_cuda lmfuse_sampling lmfuse_format)
  target_compile_definitions(cuda_op_tests PRIVATE LMFUSE_CUDA_TESTS_STANDALONE=1
    LMFUSE_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
endif()

# Micro-benchmark of the GEMVs (copy bandwidth, per-type GB/s, graph replay of launch chains).
if(EXISTS ${CMAKE_SOURCE_DIR}/bench/cuda_bench_gemv.cu)
  add_executable(cuda_bench_gemv ${CMAKE_SOURCE_DIR}/bench/cuda_bench_gemv.cu)
  target_link_libraries(cuda_bench_gemv PRIVATE lmfuse_backend_cuda lmfuse_format)
endif()

# Streaming-read limits at the decode GEMVs' sizes: register loads vs the GEMV's load pattern vs
# per-warp bulk copies (docs/PERF.md, session 8).
if(EXISTS ${CMAKE_SOURCE_DIR}/bench/cuda_bench_stream.cu)
  add_executable(cuda_bench_stream ${CMAKE_SOURCE_DIR}/bench/cuda_bench_stream.cu)
  target_link_libraries(cuda_bench_stream PRIVATE lmfuse_backend_cuda lmfuse_format)
endif()

# A PDL kernel boundary against grid barriers inside one persistent kernel (docs/PERF.md, session 15).
if(EXISTS ${CMAKE_SOURCE_DIR}/bench/cuda_bench_sync.cu)
  add_executable(cuda_bench_sync ${CMAKE_SOURCE_DIR}/bench/cuda_bench_sync.cu)
  target_link_libraries(cuda_bench_sync PRIVATE lmfuse_backend_cuda lmfuse_format)
endif()

# A persistent decode-layer prototype: one block per SM streaming every phase's weights through a
# shared-memory ring across the layer's dependent phases (docs/PERF.md, session 20).
if(EXISTS ${CMAKE_SOURCE_DIR}/bench/cuda_bench_persist.cu)
  add_executable(cuda_bench_persist ${CMAKE_SOURCE_DIR}/bench/cuda_bench_persist.cu)
  target_link_libraries(cuda_bench_persist PRIVATE lmfuse_backend_cuda lmfuse_core)
endif()

# The prefill routing sweep (in-kernel vs outer dequant vs GEMV per token; docs/PERF.md).
if(EXISTS ${CMAKE_SOURCE_DIR}/bench/cuda_bench_prefill.cu)
  add_executable(cuda_bench_prefill ${CMAKE_SOURCE_DIR}/bench/cuda_bench_prefill.cu)
  target_link_libraries(cuda_bench_prefill PRIVATE lmfuse_backend_cuda lmfuse_format CUDA::cublas)
endif()
