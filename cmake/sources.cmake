# One static library per layer; each layer globs its own sources so files can be added
# without touching CMake. Data flows top to bottom (see DESIGN.md); nothing links upward.
function(lmfuse_layer name dir)
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/${dir}/*.cpp)
  add_library(${name} STATIC ${srcs})
  target_include_directories(${name} PUBLIC ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include)
  target_link_libraries(${name} PUBLIC ${ARGN})
endfunction()

lmfuse_layer(lmfuse_util util Threads::Threads)
lmfuse_layer(lmfuse_format format lmfuse_util)
# CPU kernels use run-time dispatch: each ISA variant lives in a file named *_avx2.cpp /
# *_avx512.cpp and gets its own flags; everything else is built for the baseline.
lmfuse_layer(lmfuse_backend_cpu backend/cpu lmfuse_format)
file(GLOB avx2_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backend/cpu/*_avx2.cpp)
file(GLOB avx512_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backend/cpu/*_avx512.cpp)
set_source_files_properties(${avx2_srcs} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
set_source_files_properties(${avx512_srcs} PROPERTIES COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mfma;-mf16c;-mavx2")
lmfuse_layer(lmfuse_tokenizer tokenizer lmfuse_format)
if(PCRE2_FOUND)
  target_link_libraries(lmfuse_tokenizer PUBLIC PkgConfig::PCRE2)
  target_compile_definitions(lmfuse_tokenizer PUBLIC LMFUSE_HAVE_PCRE2=1)
endif()
# NFC normalization (tokenizer.json "normalizer": NFC, e.g. Qwen2/Qwen3).
if(UTF8PROC_FOUND)
  target_link_libraries(lmfuse_tokenizer PUBLIC PkgConfig::UTF8PROC)
  target_compile_definitions(lmfuse_tokenizer PUBLIC LMFUSE_HAVE_UTF8PROC=1)
endif()
if(NLOHMANN_JSON_INCLUDE)
  target_include_directories(lmfuse_tokenizer PUBLIC ${NLOHMANN_JSON_INCLUDE})
  target_compile_definitions(lmfuse_tokenizer PUBLIC LMFUSE_HAVE_JSON=1)
endif()
lmfuse_layer(lmfuse_sampling sampling lmfuse_util)
# model + graph + backend interface + runtime form the engine core.
file(GLOB_RECURSE core_srcs CONFIGURE_DEPENDS
  ${CMAKE_SOURCE_DIR}/src/model/*.cpp ${CMAKE_SOURCE_DIR}/src/graph/*.cpp
  ${CMAKE_SOURCE_DIR}/src/runtime/*.cpp ${CMAKE_SOURCE_DIR}/src/backend/backend.cpp)
add_library(lmfuse_core STATIC ${core_srcs})
target_include_directories(lmfuse_core PUBLIC ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include)
target_link_libraries(lmfuse_core PUBLIC lmfuse_backend_cpu lmfuse_sampling lmfuse_tokenizer lmfuse_format)
if(LMFUSE_CUDA)
  target_compile_definitions(lmfuse_core PUBLIC LMFUSE_HAVE_CUDA=1)
endif()

# The OpenAI-compatible server (src/server) over the runtime, on cpp-httplib (Debian's
# libcpp-httplib-dev: a header and a shared library, found by pkg-config in deps_check.cmake, or
# the single header scripts/carry_deps.sh carries to the GPU machine; a build without either has
# no `lmfuse serve`). The chat page is one static HTML file
# embedded in the binary as a string.
if(HTTPLIB_FOUND)
  set(_page ${CMAKE_SOURCE_DIR}/src/server/chat_page.html)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_page})
  file(READ ${_page} LMFUSE_CHAT_PAGE)
  configure_file(${CMAKE_SOURCE_DIR}/src/server/chat_page.inc.in ${CMAKE_BINARY_DIR}/generated/server/chat_page.inc @ONLY)
  file(GLOB server_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/server/*.cpp)
  add_library(lmfuse_server STATIC ${server_srcs})
  target_include_directories(lmfuse_server PUBLIC ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include
    ${NLOHMANN_JSON_INCLUDE} PRIVATE ${CMAKE_BINARY_DIR}/generated)
  target_link_libraries(lmfuse_server PUBLIC lmfuse_core lmfuse_httplib Threads::Threads)
  target_compile_definitions(lmfuse_server PUBLIC LMFUSE_HAVE_SERVER=1)
  # lmfuse_build_info{version=...} in /metrics and "version" in /v1/models (project() above).
  target_compile_definitions(lmfuse_server PRIVATE LMFUSE_VERSION="${PROJECT_VERSION}")
endif()
