#include "worker/scheduler/request.h"

namespace llmserve::worker {

bool IsFinished(RequestStatus status) {
  return status == RequestStatus::kFinishedStopped || status == RequestStatus::kFinishedLength ||
         status == RequestStatus::kFinishedAborted;
}

}  // namespace llmserve::worker
