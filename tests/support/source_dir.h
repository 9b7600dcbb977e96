#ifndef HEADROOM_TESTS_SUPPORT_SOURCE_DIR_H_
#define HEADROOM_TESTS_SUPPORT_SOURCE_DIR_H_

// The checkout the tests read models/, data/ and scripts/ from. Every test
// is compiled with this header forced in and HEADROOM_SOURCE_DIR defined as a
// call to it (tests/CMakeLists.txt), so the path is compiled into one object
// (source_dir.cc) and not into each test's: a second checkout on the same
// machine then reuses the test objects from ccache.
const char* HeadroomTestSourceDir();

#endif  // HEADROOM_TESTS_SUPPORT_SOURCE_DIR_H_
