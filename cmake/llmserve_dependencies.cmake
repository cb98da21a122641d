# Every third-party dependency, found once. All come from Debian bookworm packages
# (scripts/install-deps.sh installs them).

find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(Protobuf REQUIRED)  # MODULE mode: Debian ships no protobuf config file
find_package(gRPC CONFIG REQUIRED)
find_package(GTest CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)  # no version argument: Debian's config has none
find_package(OpenSSL REQUIRED)  # OpenSSL::Crypto: SHA-256, HMAC, RSA for the gateway's auth
find_package(ZLIB REQUIRED)  # gzip of exported traces (common/tracing/)
find_package(cpp-jwt CONFIG REQUIRED)  # cpp-jwt::cpp-jwt (header-only)
find_package(Boost REQUIRED)  # Boost::headers: Beast + Asio (header-only) for the HTTP server
find_package(PkgConfig REQUIRED)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
# The request log's PostgreSQL sink (gateway/request_log/postgres_sink.h).
pkg_check_modules(LIBPQ REQUIRED IMPORTED_TARGET libpq)
# The gateway's asynchronous, cancellable DNS for --worker_dns (gateway/router/dns_resolver.h).
pkg_check_modules(CARES REQUIRED IMPORTED_TARGET libcares)
include(GoogleTest)
