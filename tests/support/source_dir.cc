#include "tests/support/source_dir.h"

const char* HeadroomTestSourceDir() { return HEADROOM_CHECKOUT_DIR; }
