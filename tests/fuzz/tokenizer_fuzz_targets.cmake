# Tokenizer fuzz targets (included by tests/fuzz/CMakeLists.txt).
llmserve_fuzz_target(
  NAME tokenizer_json_fuzz
  SRCS tokenizer_json_fuzz.cc
  DEPS llmserve_tokenizer
  SEEDS ${CMAKE_CURRENT_SOURCE_DIR}/seeds/tokenizer_json
)
llmserve_fuzz_target(
  NAME tokenizer_encode_fuzz
  SRCS tokenizer_encode_fuzz.cc
  DEPS llmserve_tokenizer
  SEEDS ${CMAKE_CURRENT_SOURCE_DIR}/seeds/tokenizer_encode
)
llmserve_fuzz_target(
  NAME sentencepiece_model_fuzz
  SRCS sentencepiece_model_fuzz.cc
  DEPS llmserve_tokenizer
  SEEDS ${CMAKE_CURRENT_SOURCE_DIR}/seeds/sentencepiece_model
)
