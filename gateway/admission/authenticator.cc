#include "gateway/admission/authenticator.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace llmserve::gateway {
namespace {

constexpr absl::string_view kAnonymousName = "anonymous";
// Well above any JWT we accept; a longer header is refused before any work is done on it.
constexpr size_t kMaxAuthorizationBytes = 16 * 1024 + 64;

absl::Status MissingCredentials(absl::string_view why) {
  return absl::UnauthenticatedError(
      absl::StrCat(why, "; send 'Authorization: Bearer <API key or JWT>'"));
}

Principal KeyPrincipal(ApiKeyEntry key) {
  return Principal{.name = std::move(key.name),
                   .kind = Principal::Kind::kApiKey,
                   .models = std::move(key.models),
                   .admin = key.admin};
}

}  // namespace

absl::string_view PrincipalKindName(Principal::Kind kind) {
  switch (kind) {
    case Principal::Kind::kAnonymous:
      return "anonymous";
    case Principal::Kind::kApiKey:
      return "api_key";
    case Principal::Kind::kJwt:
      return "jwt";
  }
  return "unknown";
}

bool Principal::MayUseModel(absl::string_view model) const {
  return models.empty() || std::binary_search(models.begin(), models.end(), model);
}

absl::Status CheckModelAccess(const Principal& principal, absl::string_view model) {
  if (principal.MayUseModel(model)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat(principal.kind == Principal::Kind::kJwt ? "the token of \"" : "API key \"",
                   principal.name, "\" may not use model \"", model, "\""));
}

Authenticator::Authenticator(std::shared_ptr<const ApiKeyStore> api_keys,
                             std::shared_ptr<const JwtVerifier> jwt_verifier)
    : api_keys_(std::move(api_keys)), jwt_verifier_(std::move(jwt_verifier)) {}

absl::StatusOr<Principal> Authenticator::Authenticate(absl::string_view authorization,
                                                      absl::Time now) const {
  if (allows_anonymous()) {
    return Principal{
        .name = std::string(kAnonymousName), .kind = Principal::Kind::kAnonymous, .admin = true};
  }
  if (authorization.size() > kMaxAuthorizationBytes) {
    return absl::UnauthenticatedError(absl::StrCat("Authorization header is ", authorization.size(),
                                                   " bytes, more than ", kMaxAuthorizationBytes));
  }
  const absl::string_view value = absl::StripAsciiWhitespace(authorization);
  if (value.empty()) return MissingCredentials("missing credentials");
  // RFC 7235: the scheme is case-insensitive; one or more spaces separate it from the token.
  constexpr absl::string_view kScheme = "bearer";
  if (value.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme) ||
      (value[kScheme.size()] != ' ' && value[kScheme.size()] != '\t')) {
    return MissingCredentials("the Authorization header is not a Bearer token");
  }
  const absl::string_view token = absl::StripLeadingAsciiWhitespace(value.substr(kScheme.size()));
  for (unsigned char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::UnauthenticatedError(
          "the bearer token contains a space or a non-printable character");
    }
  }

  const bool looks_like_jwt = std::count(token.begin(), token.end(), '.') == 2;
  if (looks_like_jwt && jwt_verifier_ != nullptr) {
    absl::StatusOr<JwtIdentity> identity = jwt_verifier_->VerifyIdentity(token, now);
    if (identity.ok()) {
      return Principal{.name = std::move(identity->subject),
                       .kind = Principal::Kind::kJwt,
                       .models = std::move(identity->models)};
    }
    // An API key may contain two dots too; the JWT's error is the one worth reporting.
    if (api_keys_ != nullptr) {
      absl::StatusOr<ApiKeyEntry> key = api_keys_->AuthenticateEntry(token);
      if (key.ok()) return KeyPrincipal(*std::move(key));
    }
    return identity.status();
  }
  if (api_keys_ == nullptr) {
    return absl::UnauthenticatedError(
        "the bearer token is not a JWT, and API keys are not enabled");
  }
  absl::StatusOr<ApiKeyEntry> key = api_keys_->AuthenticateEntry(token);
  if (!key.ok()) return key.status();
  return KeyPrincipal(*std::move(key));
}

bool IsLoopbackAddress(absl::string_view host) {
  std::string bare(absl::StripAsciiWhitespace(host));
  if (!bare.empty() && bare.front() == '[') {
    const size_t close = bare.find(']');
    if (close == std::string::npos) return false;
    const std::string rest = bare.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return false;
    bare = bare.substr(1, close - 1);
  } else if (std::count(bare.begin(), bare.end(), ':') == 1) {
    bare = bare.substr(0, bare.find(':'));  // host:port; more colons mean a bare IPv6 address
  }
  if (absl::EqualsIgnoreCase(bare, "localhost")) return true;
  in_addr v4{};
  if (inet_pton(AF_INET, bare.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, bare.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

}  // namespace llmserve::gateway
