#include "tools/bench/plot.h"

#include <sys/wait.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace llmserve::tools {
namespace {

using Json = nlohmann::json;

// A gnuplot single-quoted string ('' stands for ').
std::string Quoted(const std::string& text) {
  return absl::StrCat("'", absl::StrReplaceAll(text, {{"'", "''"}}), "'");
}

double PlotMillis(const Json& report, const char* metric, const char* field) {
  return report[metric][field].get<double>() * 1000;
}

}  // namespace

std::string SweepPlotScript(const std::vector<Json>& reports, const std::string& title,
                            const std::string& png_path) {
  // Columns: rate label, output tok/s, TTFT p50, TTFT p99, TPOT p50, TPOT p99.
  std::string data = "$sweep << EOD\n";
  for (const Json& report : reports) {
    if (!report["ttft_s"].is_object() || !report["tpot_s"].is_object()) continue;
    const Json& rate = report["rate"];
    const std::string label =
        rate.is_string() ? rate.get<std::string>() : absl::StrFormat("%g/s", rate.get<double>());
    absl::StrAppendFormat(&data, "\"%s\" %.3f %.3f %.3f %.3f %.3f\n", label,
                          report["output_tokens_per_s"].get<double>(),
                          PlotMillis(report, "ttft_s", "p50"), PlotMillis(report, "ttft_s", "p99"),
                          PlotMillis(report, "tpot_s", "p50"), PlotMillis(report, "tpot_s", "p99"));
  }
  absl::StrAppend(&data, "EOD\n");
  return absl::StrCat(
      data, "set terminal pngcairo size 1280,520 font 'sans,10'\n", "set output ", Quoted(png_path),
      "\n", "set multiplot layout 1,2 title ", Quoted(title), "\n",
      "set grid\nset key top left\nset xlabel 'output tokens/s'\nset offsets graph 0.05, graph "
      "0.1, graph 0.1, graph 0.05\n",
      "set ylabel 'TTFT (ms)'\nset title 'Time to first token'\n",
      "plot $sweep using 2:3 with linespoints pt 7 title 'median', "
      "'' using 2:4 with linespoints pt 5 title 'p99', "
      "'' using 2:4:1 with labels offset 0,1 notitle\n",
      "set ylabel 'TPOT (ms)'\nset title 'Time per output token'\n",
      "plot $sweep using 2:5 with linespoints pt 7 title 'median', "
      "'' using 2:6 with linespoints pt 5 title 'p99', "
      "'' using 2:6:1 with labels offset 0,1 notitle\n",
      "unset multiplot\n");
}

absl::Status PlotSweep(const std::vector<Json>& reports, const std::string& title,
                       const std::string& png_path) {
  if (png_path.find_first_of("\n\r") != std::string::npos) {
    return absl::InvalidArgumentError("--plot: the path has a line break");
  }
  bool drawable = false;
  for (const Json& report : reports) drawable |= report["ttft_s"].is_object();
  if (!drawable) {
    return absl::InvalidArgumentError("--plot: no rate completed a request, nothing to draw");
  }
  FILE* gnuplot = popen("gnuplot", "w");
  if (gnuplot == nullptr) return absl::FailedPreconditionError("--plot: cannot start gnuplot");
  const std::string script = SweepPlotScript(reports, title, png_path);
  fwrite(script.data(), 1, script.size(), gnuplot);
  const int status = pclose(gnuplot);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    return absl::FailedPreconditionError(
        "--plot needs gnuplot, which is not installed (Debian: apt-get install gnuplot-nox)");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--plot: gnuplot failed writing ", png_path, " (see its messages above)"));
  }
  return absl::OkStatus();
}

}  // namespace llmserve::tools
