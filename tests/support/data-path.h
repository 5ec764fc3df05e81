// Where test data lives. All paths come from here.
#ifndef EMBER_TESTS_DATA_PATH_H
#define EMBER_TESTS_DATA_PATH_H

#include <string>

void        ember_test_set_data_dir(const std::string & dir);
// The shared reference directory (has fixtures/ and models/), "" when not given or absent.
std::string ember_test_data_dir();
// data_dir + "/" + rel, or "" when the data dir or the file does not exist.
std::string ember_test_data_path(const std::string & rel);
// A fresh temporary directory for this test process (removed at exit).
std::string ember_test_tmp_dir();
// `want` threads, capped by EMBER_TEST_MAX_THREADS when set (emulators such as qemu-user make
// threads that spin-wait for each other very slow, and some cannot start threads at all).
int         ember_test_threads(int want);

#endif
