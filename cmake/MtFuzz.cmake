# The fuzz build's instrumentation (tests/fuzz): every object with ASan and UBSan (any UB report
# aborts, so libFuzzer counts it as a finding) and libFuzzer's coverage; the fuzz targets link
# libFuzzer's main (mt_add_fuzzer in tests/fuzz). Needs clang (Debian's clang-16 and
# libclang-rt-16-dev); warnings stay warnings here, the main build enforces them.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "MT_FUZZ needs clang: -DCMAKE_CXX_COMPILER=clang++-16 "
                      "-DCMAKE_C_COMPILER=clang-16 (tests/fuzz/run.sh does this)")
endif()
set(MT_WARNINGS -Wall -Wextra -Wno-unused-parameter)
add_compile_options(-fsanitize=address,undefined -fsanitize=fuzzer-no-link
                    -fno-sanitize-recover=all -fno-omit-frame-pointer -g)
add_link_options(-fsanitize=address,undefined)
# -O1 with assertions: libFuzzer's recommended trade between compile time and speed.
set(CMAKE_C_FLAGS_RELWITHDEBINFO "-O1 -g")
set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O1 -g")
