// This machine's host name (a Kubernetes pod's name): empty when the system will not say.

#ifndef LLMSERVE_COMMON_BASE_HOST_NAME_H_
#define LLMSERVE_COMMON_BASE_HOST_NAME_H_

#include <string>

namespace llmserve::common {

std::string HostName();

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_BASE_HOST_NAME_H_
