# The real Qwen3 tokenizer (Apache-2.0, tests/data/tokenizer/qwen3-tokenizer.tar.xz, 1.4 MB) is
# unpacked into models/qwen3-tokenizer (git-ignored) at configure time: the tokenizer exactness
# tests read it, and `lmfuse random-model` embeds it by default. A folder already there is kept.
set(LMFUSE_QWEN3_TOKENIZER_DIR ${CMAKE_SOURCE_DIR}/models/qwen3-tokenizer)
set(_tar ${CMAKE_SOURCE_DIR}/tests/data/tokenizer/qwen3-tokenizer.tar.xz)
if(EXISTS ${_tar} AND NOT EXISTS ${LMFUSE_QWEN3_TOKENIZER_DIR}/tokenizer.json)
  file(ARCHIVE_EXTRACT INPUT ${_tar} DESTINATION ${CMAKE_SOURCE_DIR}/models)
  message(STATUS "lmfuse: unpacked the Qwen3 tokenizer into ${LMFUSE_QWEN3_TOKENIZER_DIR}")
endif()
