#include "common/base/host_name.h"

#include <unistd.h>

namespace llmserve::common {

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

}  // namespace llmserve::common
