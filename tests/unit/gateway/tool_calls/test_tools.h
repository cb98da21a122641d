// Tools and helpers shared by the tool-call tests.
#ifndef LLMSERVE_TESTS_UNIT_TOOL_CALLS_TEST_TOOLS_H_
#define LLMSERVE_TESTS_UNIT_TOOL_CALLS_TEST_TOOLS_H_

#include <string>
#include <vector>

#include "llmserve/v1/inference.pb.h"

namespace llmserve::gateway::tool_calls::testing {

inline llmserve::v1::Tool MakeTool(const std::string& name, const std::string& parameters = "") {
  llmserve::v1::Tool tool;
  tool.set_name(name);
  tool.set_description("does " + name);
  tool.set_parameters(parameters);
  return tool;
}

inline std::vector<llmserve::v1::Tool> TestTools() {
  return {MakeTool("get_weather",
                   R"({"type":"object","properties":{"location":{"type":"string"},)"
                   R"("unit":{"type":"string","enum":["c","f"]}},"required":["location"]})"),
          MakeTool("search"), MakeTool("get-time_2")};
}

}  // namespace llmserve::gateway::tool_calls::testing

#endif  // LLMSERVE_TESTS_UNIT_TOOL_CALLS_TEST_TOOLS_H_
