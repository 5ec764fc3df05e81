# Cross build for 64-bit Arm Linux with Debian's cross compiler (g++-aarch64-linux-gnu).
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64-linux-gnu.cmake
# Libraries come from Debian multiarch (dpkg --add-architecture arm64; libxxhash-dev:arm64),
# which installs into /usr/lib/aarch64-linux-gnu; headers are shared with the host in
# /usr/include. scripts/test-aarch64.sh installs all of it and runs the tests under qemu.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(EMBER_CROSS_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${EMBER_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${EMBER_CROSS_TRIPLE}-g++)

# Release without the loop vectorizer: Debian 12's GCC 12.2 for aarch64 dies with an internal
# compiler error in it (vect_transform_reduction) on tests/quant/test_types.cpp,
# test_q6_k.cpp and test_ember_types.cpp, at -O3 and at -O2. The NEON kernels are intrinsics
# and do not depend on it.
set(CMAKE_C_FLAGS_RELEASE "-O2 -fno-tree-loop-vectorize -DNDEBUG" CACHE STRING "Release flags (aarch64 cross build)")
set(CMAKE_CXX_FLAGS_RELEASE "-O2 -fno-tree-loop-vectorize -DNDEBUG" CACHE STRING "Release flags (aarch64 cross build)")

# Programs (glslc, ...) are the host's; libraries and headers the target's, found through the
# compiler's own search path (Debian's cross gcc searches /usr/include and the multiarch
# /usr/lib/aarch64-linux-gnu). Header-only packages (doctest) are architecture-independent, so
# CMake package configs may come from the host.
set(CMAKE_FIND_ROOT_PATH /usr/${EMBER_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(CMAKE_LIBRARY_ARCHITECTURE ${EMBER_CROSS_TRIPLE})

# pkg-config must read the arm64 .pc files only (never the host's x86-64 libraries).
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/${EMBER_CROSS_TRIPLE}/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# Run the target's programs (tests, try_run) through qemu; QEMU_LD_PREFIX or -L finds the
# cross libc.
find_program(EMBER_QEMU_AARCH64 qemu-aarch64)
if(EMBER_QEMU_AARCH64)
    set(CMAKE_CROSSCOMPILING_EMULATOR ${EMBER_QEMU_AARCH64} -L /usr/${EMBER_CROSS_TRIPLE})
endif()
