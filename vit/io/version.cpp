// The library's version, compiled in so that an application can compare it with its headers'.
#include "vitpe/vitpe_version.h"

namespace vitpe {
const char* version() noexcept { return VITPE_VERSION_STRING; }
}  // namespace vitpe
