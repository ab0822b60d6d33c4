// The public C++ header of kiln: everything an embedding program needs.
#pragma once

#include "interpreter/kiln_api.h"
